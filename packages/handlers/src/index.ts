export type * from './types.ts';
export { checkImageClassifierSignature, checkTensorSignature, isDynamicDim } from './signature-checks.ts';
export { getBuiltinHandler, builtinHandlerNames } from './builtin-handlers.ts';

/**
 * TorchServe's exact texts. Where TorchServe answers a case with a fixed sentence (or one worded
 * from the request: a model name, a version), the `message` of Marina's TorchServe-form answers is
 * that sentence, byte for byte, because users' scripts and TorchServe's own tests compare it. What
 * Marina has to add (the registered names, the routes near a mistyped path, where the key is) goes
 * to `hint`, a field of its own in the same body, and to the log line.
 *
 * Sources (pytorch/serve): `http/ResourceNotFoundException.java`, `http/MethodNotAllowedException.java`,
 * `http/TokenAuthorizationHandler.java` / `util/TokenAuthorization.java`,
 * `http/api/rest/InferenceRequestHandler.java` (the "no worker" sentence, used for a full queue too),
 * `wlm/ModelManager.java` (`Model not found: `, `Model version: … does not exist for model: …`),
 * `ts/service.py` ("Prediction failed").
 */
import type { MarinaError } from '@marina/errors';

/** `ResourceNotFoundException`'s message. */
export const TS_RESOURCE_NOT_FOUND = 'Requested resource is not found, please refer to API document.';
/** `MethodNotAllowedException`'s message. */
export const TS_METHOD_NOT_ALLOWED = 'Requested method is not allowed, please refer to API document.';
/** TorchServe's token failure, the same for a missing, wrong or expired token. */
const TS_TOKEN_FAILED = 'Token Authorization failed. Token either incorrect, expired, or not provided correctly';
/** A handler that threw (TorchServe's `ts/service.py`). */
const TS_PREDICTION_FAILED = 'Prediction failed';

/** TorchServe's sentence for a model whose job could not be queued (no worker, or a full queue). */
function tsNoWorker(modelName: string): string {
  return `Model "${modelName}" has no worker to serve inference request. Please use scale workers API to add workers.`;
}

/** An answer's text in TorchServe's form: its exact `message`, and Marina's guidance apart. */
export interface TorchServeText {
  message: string;
  hint?: string;
}

type Split = (error: MarinaError) => TorchServeText | undefined;

/** The text after `lead` at the start of `text`, trimmed of the joining punctuation; '' when nothing is left. */
function after(text: string, lead: string): string {
  const rest = text.startsWith(lead) ? text.slice(lead.length) : text;
  return rest.replace(/^[\s:;.,]+/, '').trim();
}

/** `fixed` as the message; what Marina said beyond it as the hint. */
function fixed(text: string, ...leads: string[]): Split {
  return (error) => {
    let hint = error.message;
    for (const lead of leads) if (hint.startsWith(lead)) hint = after(hint, lead);
    return { message: text, ...(hint !== '' && hint !== text ? { hint } : {}) };
  };
}

/** A message TorchServe words from the request, `head (guidance)`: the head as the message, the guidance as the hint. */
function headAndParenthesis(head: RegExp): Split {
  return (error) => {
    const match = head.exec(error.message);
    if (!match) return undefined;
    const message = match[0];
    const rest = error.message.slice(message.length).trim();
    const hint = rest.startsWith('(') && rest.endsWith(')') ? rest.slice(1, -1).trim() : rest;
    return { message, ...(hint !== '' ? { hint } : {}) };
  };
}

/** The model name a queueing error is about: from its details, else from `Model "x"` or `model 'x'` in its text. */
function modelNameOf(error: MarinaError): string | undefined {
  const fromDetails = error.details?.modelName;
  if (typeof fromDetails === 'string') return fromDetails;
  return /^Model "([^"]+)"/.exec(error.message)?.[1] ?? /^model '([^']+)'/i.exec(error.message)?.[1];
}

const noWorker: Split = (error) => {
  const modelName = modelNameOf(error);
  return modelName === undefined ? undefined : { message: tsNoWorker(modelName), hint: error.message };
};

/** Codes whose TorchServe-form message is TorchServe's own text. */
const TORCHSERVE_TEXTS: Readonly<Record<string, Split>> = {
  MARINA_ERR_ROUTE_NOT_FOUND: fixed(TS_RESOURCE_NOT_FOUND, TS_RESOURCE_NOT_FOUND),
  MARINA_ERR_METHOD_NOT_ALLOWED: fixed(TS_METHOD_NOT_ALLOWED, TS_METHOD_NOT_ALLOWED),
  // TorchServe's ManagementRequestHandler throws MethodNotAllowedException when the model API is off.
  MARINA_ERR_MODEL_API_DISABLED: fixed(TS_METHOD_NOT_ALLOWED, TS_METHOD_NOT_ALLOWED),
  MARINA_ERR_TOKEN_MISSING: fixed(TS_TOKEN_FAILED, TS_TOKEN_FAILED, 'Token Authorization failed'),
  MARINA_ERR_TOKEN_INVALID: fixed(TS_TOKEN_FAILED, TS_TOKEN_FAILED, 'Token Authorization failed'),
  MARINA_ERR_TOKEN_EXPIRED: fixed(TS_TOKEN_FAILED, TS_TOKEN_FAILED, 'Token Authorization failed'),
  MARINA_ERR_HANDLER_FAILED: fixed(TS_PREDICTION_FAILED, TS_PREDICTION_FAILED),
  // An explanation from a handler without explain_handle fails in TorchServe's BaseHandler the same way.
  MARINA_ERR_EXPLAIN_NOT_SUPPORTED: fixed(TS_PREDICTION_FAILED, TS_PREDICTION_FAILED),
  MARINA_ERR_MODEL_NOT_FOUND: headAndParenthesis(/^Model not found: [^\s(]+/),
  MARINA_ERR_MODEL_VERSION_NOT_FOUND: headAndParenthesis(/^Model version: [^\s(]* does not exist for model: [^\s(]+/),
  MARINA_ERR_NO_WORKERS: noWorker,
  // InferenceRequestHandler: BadRequestException("Parameter model_name is required."), and the
  // management API's "Parameter url is required.": the sentence alone, Marina's guidance after it.
  MARINA_ERR_BAD_REQUEST: headAndParenthesis(/^Parameter [A-Za-z_]+ is required\./),
  // TorchServe answers a full queue with the same sentence (its queue's offer() fails like a missing worker).
  MARINA_ERR_QUEUE_FULL: noWorker,
};

/**
 * The `message` and `hint` of a TorchServe-form answer: TorchServe's exact text where it has one for
 * this case, with Marina's own message as the hint; otherwise Marina's message alone.
 */
export function torchServeText(error: MarinaError): TorchServeText {
  const split = TORCHSERVE_TEXTS[error.code];
  return split?.(error) ?? { message: error.message };
}

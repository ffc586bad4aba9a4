export {
  createMarinaClient,
  type MarinaClient,
  type MarinaClientOptions,
  type PredictInput,
  type PredictOptions,
  type PredictManyOptions,
  type PredictOutcome,
  type RetryEvent,
} from './marina-client.ts';
export { MarinaClientError, isMarinaClientError, clientErrorDefinitions, type ClientErrorCode } from './errors.ts';

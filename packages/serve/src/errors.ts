/**
 * The serve package's error registry: every error the server can answer with, its
 * HTTP status and what it means. Each code is listed in docs/reference/errors.md (generated; a test checks it).
 * Where TorchServe fixes a status code, the code below keeps it; protocols/error-map.ts turns
 * an error into each protocol's wire form.
 */
import { defineErrors, isMarinaError, MarinaError } from '@marina/errors';

export const serveErrors = defineErrors(
  {
    MARINA_ERR_MODEL_NOT_FOUND: {
      statusCode: 404,
      description: 'No model of that name is registered; check the name with GET /models on the management API.',
    },
    MARINA_ERR_ROUTE_NOT_FOUND: {
      statusCode: 404,
      description:
        "No route of this API has that method and path (TorchServe's 'Requested resource is not found'); the message lists the API's routes under the same or the closest first path segment. Check the port: predictions go to the inference API, /models to the management API.",
    },
    MARINA_ERR_MODEL_VERSION_NOT_FOUND: {
      statusCode: 404,
      description: 'The model exists but not in the version asked for; the message lists the versions there are.',
    },
    MARINA_ERR_QUEUE_FULL: {
      statusCode: 503,
      description:
        "The model version's job queue (job_queue_size) is full; retry after the Retry-After header, add workers, or raise jobQueueSize.",
    },
    MARINA_ERR_NO_WORKERS: {
      statusCode: 503,
      description:
        'The model version has no workers and will get none by itself (max_worker=0, or every start failed); scale it up with PUT /models/{name}, or fix the model and register it again.',
    },
    MARINA_ERR_RESPONSE_TIMEOUT: {
      statusCode: 504,
      description:
        'The batch did not finish within responseTimeout; the worker was replaced. Raise responseTimeout or use a faster model or fewer threads per worker.',
    },
    MARINA_ERR_WORKER_OUT_OF_MEMORY: {
      statusCode: 507,
      description:
        "The worker running the request outgrew its JavaScript heap limit (model-config.yaml maxWorkerHeapMb, default 1024 MB) and was replaced; only its batch failed (TorchServe's 507 'Out of resources'). Send smaller inputs or raise the limit.",
    },
    MARINA_ERR_CLIENT_TIMEOUT: {
      statusCode: 503,
      description:
        "The request waited longer than the model's clientTimeoutInMills before a worker could start it, and was answered without running; retry later or add workers.",
    },
    MARINA_ERR_DEADLINE_EXCEEDED: {
      statusCode: 504,
      description:
        "The request's own timeout (x-marina-timeout-ms, OIP's `timeout` parameter, a gRPC deadline) ran out before a worker could start it, and it was answered without running; allow more time, send it at a higher priority, or add workers.",
    },
    MARINA_ERR_CLIENT_GONE: {
      statusCode: 499,
      description:
        'The client closed the connection (or cancelled the gRPC call) while its request waited in the queue; it was dropped without running. Nobody reads this answer; it appears in logs and metrics only.',
    },
    MARINA_ERR_PRIORITY_INVALID: {
      statusCode: 400,
      description:
        "The request's priority (x-marina-priority, OIP's `priority` parameter, gRPC metadata) is not an integer between 1 and the model's priorityLevels (0 means the model's defaultPriorityLevel); the message says the model's range.",
    },
    MARINA_ERR_TIMEOUT_INVALID: {
      statusCode: 400,
      description:
        "The request's timeout (x-marina-timeout-ms in ms, OIP's `timeout` parameter in microseconds as Triton's) is not a non-negative integer; 0 means none.",
    },
    MARINA_ERR_TRACING_CONFIG_INVALID: {
      statusCode: 500,
      description:
        'An OTEL_* variable that configures tracing has a value Marina does not support (OTEL_TRACES_EXPORTER other than otlp, console or none; a protocol other than http/protobuf or http/json; an unknown OTEL_TRACES_SAMPLER or a ratio outside 0..1; an endpoint that is not an http(s) URL; an export timeout that is not a positive number of ms, a compression other than gzip or none, a certificate variable naming a file that cannot be read); the server does not start. Fix or unset the variable named in the message.',
    },
    MARINA_ERR_THREAD_BUDGET_EXCEEDED: {
      statusCode: 400,
      description:
        'A scale or register asked for more workers than the thread budget allows: a model may always have one worker, more must keep the sum of workers × intra-op threads over all models within the cores (4 × the cores where threads are pinned); ask for fewer workers.',
    },
    MARINA_ERR_WORKER_DIED: {
      statusCode: 500,
      description:
        'The worker running the request crashed; it is restarted with back-off. The server log has the cause.',
    },
    MARINA_ERR_WORKER_START_FAILED: {
      statusCode: 500,
      description:
        'A worker could not load the model or its handler (the message has the cause); fix the archive and register it again.',
    },
    MARINA_ERR_WARMUP_FAILED: {
      statusCode: 500,
      description:
        "A worker's warm-up (model-config.yaml `warmup:`) failed, so the model never became ready: warmup.input is missing or unreadable, a custom handler has no warmup.input, or the handler failed on it. The message has the cause.",
    },
    MARINA_ERR_WORKER_STARTUP_TIMEOUT: {
      statusCode: 500,
      description: 'A worker did not finish loading within startupTimeout; raise startupTimeout for large models.',
    },
    MARINA_ERR_HANDLER_FAILED: {
      statusCode: 503,
      description:
        "The handler threw while processing the batch (TorchServe's 'Prediction failed'); the message has the handler's error.",
    },
    MARINA_ERR_HANDLER_RESULT_COUNT: {
      statusCode: 503,
      description:
        "The handler returned a different number of results than requests in the batch (TorchServe's 'number of batch response mismatched'); return one item per request.",
    },
    MARINA_ERR_HANDLER_OUTPUT_INVALID: {
      statusCode: 503,
      description: 'The handler returned something that is not a list, or an item that cannot be serialised to JSON.',
    },
    MARINA_ERR_REQUEST_TOO_LARGE: {
      statusCode: 413,
      description: 'The request body is larger than max_request_size; send a smaller body or raise max_request_size.',
    },
    MARINA_ERR_URI_TOO_LONG: {
      statusCode: 414,
      description:
        'A path parameter (a model name or version) is longer than 1024 characters; no model can have such a name (the rule allows 128). Answered after the token check.',
    },
    MARINA_ERR_HEADERS_TOO_LARGE: {
      statusCode: 431,
      description:
        "The request line and headers together are larger than Node's limit (16 KiB); answered before any route or token check, and the connection is closed. Send shorter headers, and inputs in the body.",
    },
    MARINA_ERR_JSON_TOO_DEEP: {
      statusCode: 400,
      description:
        'A JSON body (or a JSON part of a request) nests arrays and objects deeper than 128 levels; no model input needs that, and walking it would exhaust the stack. Flatten the input.',
    },
    MARINA_ERR_MULTIPART_TOO_MANY_PARTS: {
      statusCode: 413,
      description:
        'A multipart body has more parts (fields and files) than the server reads (1000); send the input in fewer fields.',
    },
    MARINA_ERR_BAD_REQUEST: {
      statusCode: 400,
      description:
        'The request is malformed: a multipart body that cannot be parsed or has no fields, a parameter of the wrong type or range, or a body that is not valid JSON; the message names what was wrong.',
    },
    MARINA_ERR_MODEL_LOAD_FAILED: {
      statusCode: 400,
      description:
        'A model could not be opened or its settings are invalid; the message names the archive and the cause. Other models still load.',
    },
    MARINA_ERR_MODEL_VERSION_CONFLICT: {
      statusCode: 409,
      description: 'That model version is already registered; unregister it first or give another version.',
    },
    MARINA_ERR_DEFAULT_VERSION_REMOVAL: {
      statusCode: 403,
      description: 'The default version cannot be unregistered while other versions exist; set another default first.',
    },
    MARINA_ERR_API_EXPLORER_UNREACHABLE: {
      statusCode: 403,
      description:
        'The API explorer does not relay a call to a listener that clients of the management address cannot reach (for example an inference listener kept on 127.0.0.1 while management is public); call that listener directly from where it is reachable.',
    },
    MARINA_ERR_INVALID_WORKER_COUNT: {
      statusCode: 400,
      description:
        'A worker count is negative, or max_worker is less than min_worker (on register, scale or the models JSON).',
    },
    MARINA_ERR_MODEL_SETTINGS_INVALID: {
      statusCode: 400,
      description:
        'A batchSize, maxBatchDelay, timeout or queue size from model-config.yaml, the models JSON or the register call is not a valid number.',
    },
    MARINA_ERR_MODEL_STORE_MISSING: {
      statusCode: 500,
      description: 'load_models was set but there is no model_store, or it is not a readable folder.',
    },
    MARINA_ERR_SERVER_CLOSING: {
      statusCode: 503,
      description: 'The server is shutting down and accepts no new requests; retry against another replica.',
    },
    MARINA_ERR_MODEL_UNLOADING: {
      statusCode: 503,
      description:
        'The model version is being unregistered, unloaded or evicted (or the server is stopping): it takes no new requests, queued ones that no worker is left to run are answered with this, and so is a running batch still running when unload_grace_seconds ran out (its thread is abandoned).',
    },
    MARINA_ERR_MEMORY_BUDGET_FULL: {
      statusCode: 503,
      description:
        'The model version had to be loaded to answer, but model_memory_budget was full of models that are pinned, busy or loading, and none became free within its startupTimeout; retry after the Retry-After header, unpin a model, or raise model_memory_budget.',
    },
    MARINA_ERR_MODEL_LARGER_THAN_BUDGET: {
      statusCode: 400,
      description:
        'The model version alone needs more memory than the whole model_memory_budget (its estimate before a load, or what its last load measured), so it could never be loaded; raise model_memory_budget or give it fewer workers.',
    },
    MARINA_ERR_EXPLAIN_NOT_SUPPORTED: {
      statusCode: 503,
      description:
        "POST /explanations (or /v1/models/{m}:explain) on a model whose handler has no explain: Marina's handlers do not implement explanations, and TorchServe answers a handler without one with 503 'Prediction failed'. Use /predictions.",
    },
    MARINA_ERR_WORKFLOWS_NOT_IMPLEMENTED: {
      statusCode: 501,
      description:
        "The workflow routes (/workflows, /wfpredict) are TorchServe's and not implemented in Marina yet; register the models of the workflow and call /predictions for each.",
    },
    MARINA_ERR_MODEL_PATH_INVALID: {
      statusCode: 400,
      description:
        "A ModelMesh loadModel's modelPath is not a model Marina can serve: it must name a .mar (or .tar.gz) archive, an extracted archive folder (with MAR-INF/MANIFEST.json), a bare .onnx file (served by the tensor handler), or a folder holding exactly one of those.",
    },
    MARINA_ERR_MODEL_SIGNATURE_UNREADABLE: {
      statusCode: 500,
      description:
        "The model's ONNX file could not be read for its inputs and outputs (model metadata, input checks); the message names the file. Check the archive with `model-archiver validate`.",
    },
    MARINA_ERR_INTERNAL: {
      statusCode: 500,
      description: 'An unexpected error inside the server; the server log has the stack. Please report it.',
    },
  },
  {
    // Codes merged into one with the same meaning: the old names still create (and document) the code they became.
    aliases: {
      MARINA_ERR_MANAGEMENT_BAD_REQUEST: 'MARINA_ERR_BAD_REQUEST',
      MARINA_ERR_WORKER_RANGE_INVALID: 'MARINA_ERR_INVALID_WORKER_COUNT',
    },
  },
);

export type ServeErrorCode = keyof typeof serveErrors.definitions;
export const createServeError = serveErrors.create;

/** Wraps anything thrown into a MarinaError (unknown errors become MARINA_ERR_INTERNAL). */
export function toMarinaError(error: unknown): MarinaError {
  if (isMarinaError(error)) return error;
  const message = error instanceof Error ? error.message : String(error);
  return createServeError.MARINA_ERR_INTERNAL(`internal error: ${message}`, { cause: error });
}

export { MarinaError, isMarinaError };

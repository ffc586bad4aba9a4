import { defineErrors } from '@marina/errors';

/**
 * Error codes of configuration loading and of the `serve` launcher. Each is listed in
 * docs/reference/errors.md (generated; a test checks); these never reach an HTTP API, so the status
 * code only says "the server could not start".
 */
export const configErrors = defineErrors({
  MARINA_ERR_CONFIG_FILE_UNREADABLE: {
    statusCode: 500,
    description:
      'The config file named by TS_CONFIG_FILE or --ts-config (or found by the search order) cannot be read: check the path and its permissions.',
  },
  MARINA_ERR_CONFIG_LINE_MALFORMED: {
    statusCode: 500,
    description:
      'A line of config.properties is not `key=value` (or `key: value`): add the separator or comment the line out with `#`.',
  },
  MARINA_ERR_CONFIG_MODELS_JSON_INVALID: {
    statusCode: 500,
    description:
      'The `models=` value is not valid JSON; the message gives file, line, column and the offending line with a caret.',
  },
  MARINA_ERR_CONFIG_MODELS_INVALID: {
    statusCode: 500,
    description:
      'The `models=` JSON parses but does not have the shape {name: {version: {minWorkers, maxWorkers, batchSize, ...}}} or a value has the wrong type.',
  },
  MARINA_ERR_CONFIG_VALUE_INVALID: {
    statusCode: 500,
    description:
      'A value has the wrong type or is out of range (e.g. `job_queue_size=abc`); the message names the key, where it came from and what is allowed.',
  },
  MARINA_ERR_CONFIG_ENV_VAR_UNSET: {
    statusCode: 500,
    description:
      'A `$$VAR$$` placeholder names an environment variable that is not set: export it or write the value directly.',
  },
  MARINA_ERR_CONFIG_ADDRESS_INVALID: {
    statusCode: 500,
    description: 'An inference/management/metrics address is not `http(s)://host[:port]` with a port in 0..65535.',
  },
  MARINA_ERR_CONFIG_ALLOWED_URLS_INVALID: {
    statusCode: 500,
    description: 'An entry of `allowed_urls` is not a valid regular expression.',
  },
  MARINA_ERR_CONFIG_LOAD_MODELS_INVALID: {
    statusCode: 500,
    description: 'An entry of `load_models` / `--models` is not `all`, `file.mar`, `name=file.mar` or a URL.',
  },
  MARINA_ERR_CONFIG_MODEL_STORE_MISSING: {
    statusCode: 500,
    description: 'No model store: pass `--model-store DIR` or set `model_store` in config.properties.',
  },
  MARINA_ERR_CONFIG_MODEL_STORE_NOT_FOUND: {
    statusCode: 500,
    description: 'The model store path does not exist or is not a folder.',
  },
  MARINA_ERR_CONFIG_TLS_FILES_MISSING: {
    statusCode: 500,
    description:
      'An https:// address needs `private_key_file` and `certificate_file` (Marina does not generate a self-signed certificate): both set, each naming a readable file (relative paths resolve against the working directory).',
  },
  MARINA_ERR_ADDRESS_IN_USE: {
    statusCode: 500,
    description:
      'Another process listens on the port of inference_address, management_address or metrics_address (checked before any model loads); the message names the address and the key: stop that process or change the key.',
  },
  MARINA_ERR_ADDRESS_UNAVAILABLE: {
    statusCode: 500,
    description:
      'An address cannot be bound: a port below 1024 without privileges (EACCES), or a host that is not this machine (EADDRNOTAVAIL); change the key the message names.',
  },
  MARINA_ERR_NO_MODEL_LOADED: {
    statusCode: 500,
    description:
      'Every model that load_models / --models (or the snapshot) named failed to load, so the server stopped instead of serving nothing; the lines before it say why each failed. Fix the archives or the names, or start without models.',
  },
  MARINA_ERR_CLI_ARGS_INVALID: {
    statusCode: 500,
    description: 'The launcher flags contradict each other (e.g. `--start --stop`) or a flag value is missing.',
  },
  MARINA_ERR_SERVER_ALREADY_RUNNING: {
    statusCode: 500,
    description: '`serve --start` found a live server through the pid file: stop it with `serve --stop` first.',
  },
  MARINA_ERR_SERVER_START_FAILED: {
    statusCode: 500,
    description: 'The background server exited during start-up; the tail of its log is printed.',
  },
  MARINA_ERR_SERVER_STOP_TIMEOUT: {
    statusCode: 500,
    description:
      '`serve --stop` sent SIGTERM but the server did not exit in time (it may still be draining requests); retry or kill the pid.',
  },
});

export const configError = configErrors.create;

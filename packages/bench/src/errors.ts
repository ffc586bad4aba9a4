import { defineErrors } from '@marina/errors';

/** Error codes of `@marina/bench`. Each is listed in docs/reference/errors.md (generated). */
export const benchErrors = defineErrors({
  MARINA_ERR_BENCH_OPTION_INVALID: {
    statusCode: 400,
    description:
      'A bench option has a value outside its range (for example --images 0 or an unknown --experiments name); fix the flag as the message says.',
  },
  MARINA_ERR_BENCH_DEPENDENCY_MISSING: {
    statusCode: 500,
    description:
      'A workspace package the bench needs (@marina/model-zoo, @marina/archive or the serve CLI) is missing or lacks the expected export; run `pnpm install` and check the package builds.',
  },
  MARINA_ERR_BENCH_CHILD_FAILED: {
    statusCode: 500,
    description:
      'A measured child process (ceiling run, decentralized job or bare fastify server) exited non-zero or printed no result; its stderr tail is in the message.',
  },
  MARINA_ERR_BENCH_SERVER_START_FAILED: {
    statusCode: 500,
    description:
      'The Marina server did not answer GET /ping in time or exited during start-up; its log tail is in the message.',
  },
  MARINA_ERR_BENCH_REQUESTS_FAILED: {
    statusCode: 500,
    description:
      'Every request of a load run failed, so no latency could be measured; the first status code and body are in the message.',
  },
  MARINA_ERR_BENCH_PROFILE_FAILED: {
    statusCode: 500,
    description:
      "marina-bench profile could not load or run the model under onnxruntime's profiler (the message has onnxruntime's error and the input shapes used); give dynamic sizes with --dim name=N or a sample with --input.",
  },
  MARINA_ERR_BENCH_TUNE_NO_RESULT: {
    statusCode: 500,
    description:
      'marina-bench tune measured no configuration successfully within --budget-s (each one starts a server and loads the model); raise the budget, or read the server log the message names.',
  },
});

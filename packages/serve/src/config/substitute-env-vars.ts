import { configError } from './config-errors.ts';

const PLACEHOLDER = /\$\$([^$]+)\$\$/g;

/**
 * Replaces `$$NAME$$` with the environment variable NAME, as TorchServe does for every value of the file.
 *
 * @param origin where the value came from (`config.properties:12`), for the message.
 * @throws MARINA_ERR_CONFIG_ENV_VAR_UNSET when NAME is not set.
 */
export function substituteEnvVars(options: {
  key: string;
  value: string;
  origin: string;
  env: NodeJS.ProcessEnv;
}): string {
  return options.value.replace(PLACEHOLDER, (_match, name: string) => {
    const value = options.env[name];
    if (value === undefined) {
      throw configError.MARINA_ERR_CONFIG_ENV_VAR_UNSET(
        `${options.origin}: '${options.key}' uses $$${name}$$ but the environment variable ${name} is not set. Export ${name} or write the value directly.`,
        { details: { key: options.key, variable: name, origin: options.origin } },
      );
    }
    return value;
  });
}

/**
 * The text with each `$$NAME$$` turned into a number of the same length, so a syntax check of the
 * unsubstituted models JSON passes `"batchSize": $$BATCH$$` and its offsets still map to file columns.
 */
export function maskPlaceholders(text: string): string {
  return text.replace(PLACEHOLDER, (placeholder) => '0'.padEnd(placeholder.length));
}

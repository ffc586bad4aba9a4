import { accessSync, constants, statSync } from 'node:fs';
import path from 'node:path';
import type { ListenAddress } from './server-config.ts';
import { configError } from './config-errors.ts';

/**
 * An https:// listener or gRPC TLS needs both PEM files, and both must be readable now, so a wrong
 * path is a configuration error naming the key, not a raw ENOENT after the models have loaded.
 *
 * @param origin where a key's value came from, for messages.
 * @throws MARINA_ERR_CONFIG_TLS_FILES_MISSING
 */
export function checkTlsFiles(options: {
  addresses: readonly ListenAddress[];
  isGrpcSslEnabled: boolean;
  privateKeyFile: string | undefined;
  certificateFile: string | undefined;
  origin: (key: string) => string;
  cwd: string;
}): void {
  const hasHttps = options.addresses.some((address) => address.protocol === 'https') || options.isGrpcSslEnabled;
  if (!hasHttps) return;
  if (!options.privateKeyFile || !options.certificateFile) {
    throw configError.MARINA_ERR_CONFIG_TLS_FILES_MISSING(
      options.isGrpcSslEnabled
        ? 'enable_grpc_ssl=true needs private_key_file and certificate_file (PEM files); set both, or turn enable_grpc_ssl off.'
        : 'an https:// address needs private_key_file and certificate_file (PEM files); set both, or use http:// behind a TLS proxy.',
    );
  }
  const files = { private_key_file: options.privateKeyFile, certificate_file: options.certificateFile };
  for (const key of ['private_key_file', 'certificate_file'] as const)
    assertReadableTlsFile({ key, value: files[key], origin: options.origin(key), cwd: options.cwd });
}

/**
 * The TLS files are read when the https listener starts; checked here so a wrong path is a
 * configuration error naming the key, not a raw ENOENT after the models have loaded.
 *
 * @throws MARINA_ERR_CONFIG_TLS_FILES_MISSING
 */
function assertReadableTlsFile(options: {
  key: 'private_key_file' | 'certificate_file';
  value: string;
  origin: string;
  cwd: string;
}): void {
  const filePath = path.resolve(options.cwd, options.value);
  let problem: string | undefined;
  try {
    if (statSync(filePath).isFile()) accessSync(filePath, constants.R_OK);
    else problem = 'is not a file';
  } catch (error) {
    problem = `cannot be read (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`;
  }
  if (problem === undefined) return;
  const what = options.key === 'private_key_file' ? 'the PEM private key' : 'the PEM certificate (chain)';
  throw configError.MARINA_ERR_CONFIG_TLS_FILES_MISSING(
    `${options.origin}: ${options.key}=${options.value}: ${filePath} ${problem}. Point ${options.key} at ${what} (relative paths are resolved against ${options.cwd}) and check its permissions, or use http:// behind a TLS proxy.`,
    { details: { key: options.key, path: filePath, origin: options.origin } },
  );
}

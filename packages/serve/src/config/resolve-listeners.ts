import type { ListenAddress } from './server-config.ts';
import type { RawConfig } from './validate-config-values.ts';
import { checkTlsFiles } from './check-tls-files.ts';
import { configError } from './config-errors.ts';
import { isLoopbackHost, parseListenAddress } from './parse-listen-address.ts';

/** The three HTTP listeners' addresses. */
export interface Listeners {
  inferenceAddress: ListenAddress;
  managementAddress: ListenAddress;
  metricsAddress: ListenAddress;
}

/**
 * Parses the HTTP listeners' addresses and checks what depends on where the server listens: TLS
 * files for https:// and gRPC TLS, the ModelMesh SPI's memory budget. Listeners that other machines
 * can reach without a key are added to `warnings`.
 *
 * @param origin where a key's value came from, for messages.
 * @throws MARINA_ERR_CONFIG_ADDRESS_INVALID, MARINA_ERR_CONFIG_TLS_FILES_MISSING, MARINA_ERR_CONFIG_VALUE_INVALID
 */
export function resolveListeners(options: {
  checked: RawConfig;
  origin: (key: string) => string;
  cwd: string;
  warnings: string[];
}): Listeners {
  const { checked, origin } = options;
  const address = (key: 'inference_address' | 'management_address' | 'metrics_address') =>
    parseListenAddress({ key, value: checked[key], origin: origin(key) });
  const listeners = {
    inferenceAddress: address('inference_address'),
    managementAddress: address('management_address'),
    metricsAddress: address('metrics_address'),
  };
  checkTlsFiles({
    addresses: [listeners.inferenceAddress, listeners.managementAddress, listeners.metricsAddress],
    isGrpcSslEnabled: checked.enable_grpc_ssl,
    privateKeyFile: checked.private_key_file,
    certificateFile: checked.certificate_file,
    origin,
    cwd: options.cwd,
  });
  checkModelMeshRuntime(options);
  if (checked.disable_token_authorization) {
    const exposed = [listeners.inferenceAddress, listeners.managementAddress].filter(
      (listener) => !isLoopbackHost(listener.host),
    );
    if (exposed.length > 0)
      options.warnings.push(
        `token authorization is disabled while ${exposed.map((listener) => listener.raw).join(' and ')} can be reached from other machines`,
      );
  }
  return listeners;
}

/** The ModelMesh SPI reports the memory budget as capacity, and has no token authorization. */
function checkModelMeshRuntime(options: { checked: RawConfig; origin: (key: string) => string; warnings: string[] }) {
  const { checked, origin } = options;
  if (checked.modelmesh_runtime_port === undefined) return;
  if (checked.model_memory_budget === undefined)
    throw configError.MARINA_ERR_CONFIG_VALUE_INVALID(
      `${origin('modelmesh_runtime_port')}: modelmesh_runtime_port needs model_memory_budget: ModelMesh places models by the capacity the runtime reports, and Marina reports its budget. Set model_memory_budget (e.g. 60% or 3GB), or remove modelmesh_runtime_port`,
      { details: { key: 'modelmesh_runtime_port' } },
    );
  if (!isLoopbackHost(checked.modelmesh_runtime_address))
    options.warnings.push(
      `${origin('modelmesh_runtime_address')}: the ModelMesh model-runtime SPI (no token authorization: ModelMesh sends no key) listens on ${checked.modelmesh_runtime_address}, which other machines can reach; keep it on 127.0.0.1, where ModelMesh's container calls it`,
    );
}

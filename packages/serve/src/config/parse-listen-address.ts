import type { ListenAddress } from './server-config.ts';
import { configError } from './config-errors.ts';

const ADDRESS_PATTERN = /^(https?):\/\/(\[[^\]]+\]|[^:/?#\s]+)(?::(\d+))?\/?$/i;

/**
 * Parses an `*_address` value: `http(s)://host[:port]` (IPv6 as `[::1]`). Without a port, 80 for
 * http and 443 for https, as TorchServe's Connector does. Port 0 asks the OS for a free port.
 *
 * @param origin where the value came from, for the error message (e.g. `config.properties:3`).
 * @throws MARINA_ERR_CONFIG_ADDRESS_INVALID for anything else, `unix:` sockets included.
 */
export function parseListenAddress(options: { key: string; value: string; origin: string }): ListenAddress {
  const raw = options.value.trim();
  const match = ADDRESS_PATTERN.exec(raw);
  const port = match?.[3] === undefined ? undefined : Number(match[3]);
  if (!match || (port !== undefined && port > 65535)) {
    const hint = raw.startsWith('unix:') ? ' Unix sockets are not supported yet;' : '';
    throw configError.MARINA_ERR_CONFIG_ADDRESS_INVALID(
      `${options.origin}: ${options.key}=${raw} is not a valid address.${hint} Use http(s)://host[:port] with a port in 0..65535, e.g. http://127.0.0.1:8080.`,
      { details: { key: options.key, value: raw, origin: options.origin } },
    );
  }
  const protocol = match[1]!.toLowerCase() as 'http' | 'https';
  const host = match[2]!.replace(/^\[(.*)\]$/, '$1');
  return { protocol, host, port: port ?? (protocol === 'https' ? 443 : 80), raw };
}

/** True for addresses only this machine can reach. */
export function isLoopbackHost(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\./.test(host);
}

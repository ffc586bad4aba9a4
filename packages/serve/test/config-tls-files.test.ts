/** private_key_file / certificate_file are checked at config load, not left to a raw ENOENT at listen. */
import { mkdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { configFromProperties, loadConfig } from '../src/config/load-config.ts';
import { useTempDirs } from './temp-dirs.ts';

const newTempDir = useTempDirs('marina-config-tls-files-');

/** A folder with the named files present (empty: only their presence is checked at load). */
function dirWithFiles(...names: string[]): string {
  const cwd = newTempDir();
  for (const name of names) writeFileSync(path.join(cwd, name), '');
  return cwd;
}

function errorOf(action: () => unknown): { code?: string; message: string; details?: Record<string, unknown> } {
  try {
    action();
  } catch (error) {
    return error as { code?: string; message: string; details?: Record<string, unknown> };
  }
  throw new Error('expected an error');
}

const HTTPS = { inference_address: 'https://127.0.0.1:8443' };

describe('TLS files at config load', () => {
  it('rejects a missing private_key_file, naming the key, the resolved path and what to do', () => {
    const cwd = dirWithFiles('cert.pem');
    const error = errorOf(() =>
      configFromProperties({ ...HTTPS, private_key_file: 'tls/key.pem', certificate_file: 'cert.pem' }, { cwd }),
    );
    expect(error.code).toBe('MARINA_ERR_CONFIG_TLS_FILES_MISSING');
    expect(error.message).toContain('private_key_file=tls/key.pem');
    expect(error.message).toContain(path.join(cwd, 'tls', 'key.pem'));
    expect(error.message).toContain('ENOENT');
    expect(error.message).toContain('Point private_key_file at the PEM private key');
    expect(error.details).toMatchObject({ key: 'private_key_file', path: path.join(cwd, 'tls', 'key.pem') });
  });

  it('rejects a missing certificate_file with the file:line it was set at', async () => {
    const cwd = dirWithFiles('key.pem');
    writeFileSync(
      path.join(cwd, 'config.properties'),
      'inference_address=https://127.0.0.1:8443\nprivate_key_file=key.pem\ncertificate_file=/nonexistent/cert.pem\n',
    );
    const error = await loadConfig({ cliOptions: {}, env: {}, cwd }).then(
      () => undefined,
      (caught: unknown) => caught as { code?: string; message: string },
    );
    expect(error?.code).toBe('MARINA_ERR_CONFIG_TLS_FILES_MISSING');
    expect(error?.message).toContain('config.properties:3: certificate_file=/nonexistent/cert.pem');
  });

  it('rejects a folder given as a TLS file', () => {
    const cwd = dirWithFiles('key.pem');
    mkdirSync(path.join(cwd, 'certs'));
    const error = errorOf(() =>
      configFromProperties({ ...HTTPS, private_key_file: 'key.pem', certificate_file: 'certs' }, { cwd }),
    );
    expect(error.code).toBe('MARINA_ERR_CONFIG_TLS_FILES_MISSING');
    expect(error.message).toContain(`${path.join(cwd, 'certs')} is not a file`);
  });

  it('resolves both files against the working directory when they exist', () => {
    const cwd = dirWithFiles('key.pem', 'cert.pem');
    const config = configFromProperties(
      { ...HTTPS, private_key_file: 'key.pem', certificate_file: 'cert.pem' },
      { cwd },
    );
    expect(config).toMatchObject({
      privateKeyFile: path.join(cwd, 'key.pem'),
      certificateFile: path.join(cwd, 'cert.pem'),
    });
  });

  it('does not check the files when no address is https (they are never read)', () => {
    const cwd = newTempDir();
    const config = configFromProperties(
      { private_key_file: 'missing-key.pem', certificate_file: 'missing-cert.pem' },
      { cwd },
    );
    expect(config.privateKeyFile).toBe(path.join(cwd, 'missing-key.pem'));
  });
});

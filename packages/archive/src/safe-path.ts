import { realpath } from 'node:fs/promises';
import { isAbsolute, posix, relative, resolve, sep } from 'node:path';
import { archiveErrors } from './errors.ts';

/**
 * Why an archive entry name is unsafe, or undefined when it is a plain relative path.
 * Rejects absolute paths (also `C:` and `\\`), `..` segments and NUL bytes.
 */
export function unsafeEntryReason(name: string): string | undefined {
  if (name.includes('\0')) return 'contains a NUL byte';
  const normalised = name.replaceAll('\\', '/');
  if (normalised.startsWith('/') || /^[A-Za-z]:/.test(normalised)) return 'is an absolute path';
  if (normalised.split('/').includes('..')) return "contains a '..' segment";
  return undefined;
}

/** True when `child` is `root` or below it (both absolute). */
export function isInside(root: string, child: string): boolean {
  const rel = relative(root, child);
  return rel === '' || (!rel.startsWith(`..${sep}`) && rel !== '..' && !isAbsolute(rel));
}

/**
 * Resolves a name from the manifest inside `root`.
 * @throws MARINA_ERR_ARCHIVE_PATH_ESCAPE when it would leave `root`.
 */
export function resolveInside(root: string, name: string, field: string): string {
  const reason = unsafeEntryReason(name);
  const path = resolve(root, posix.normalize(name.replaceAll('\\', '/')));
  if (reason !== undefined || !isInside(resolve(root), path)) {
    throw archiveErrors.create.MARINA_ERR_ARCHIVE_PATH_ESCAPE(
      `${field} '${name}' ${reason ?? 'resolves outside the archive'}; archives may only name files inside themselves`,
      { details: { file: name } },
    );
  }
  return path;
}

/**
 * The one containment helper for every file a manifest or model-config.yaml names, used alike by
 * the validator and the server: `name` is normalised and resolved inside `root` (see
 * resolveInside), then, where the file exists, its real path (links followed, as in a folder
 * archive) must still be inside `root`'s real path. Nothing outside `root` is read, and the
 * error never says what lies outside.
 * @throws MARINA_ERR_ARCHIVE_PATH_ESCAPE when `name` is absolute, has `..`, or resolves outside `root`.
 */
export async function resolveManifestPath(root: string, name: string, field: string): Promise<string> {
  const path = resolveInside(root, name, field);
  const [realRoot, real] = await Promise.all([
    realpath(root).catch(() => resolve(root)),
    realpath(path).catch(() => undefined),
  ]);
  if (real !== undefined && !isInside(realRoot, real)) {
    throw archiveErrors.create.MARINA_ERR_ARCHIVE_PATH_ESCAPE(
      `${field} '${name}' is a link that resolves outside the archive; archives may only name files inside themselves`,
      { details: { file: name } },
    );
  }
  return path;
}

/** The manifest fields that name files inside the archive. */
export const MANIFEST_FILE_FIELDS = ['serializedFile', 'modelFile', 'requirementsFile', 'configFile'] as const;
export type ManifestFileField = (typeof MANIFEST_FILE_FIELDS)[number];

/**
 * Every file the manifest's `model` names, each through resolveManifestPath.
 * @throws MARINA_ERR_ARCHIVE_PATH_ESCAPE for the first field that leaves `modelDir`.
 */
export async function resolveManifestFiles(
  modelDir: string,
  model: Partial<Record<ManifestFileField, unknown>>,
): Promise<Partial<Record<ManifestFileField, string>>> {
  const files: Partial<Record<ManifestFileField, string>> = {};
  for (const field of MANIFEST_FILE_FIELDS) {
    const name = model[field];
    if (typeof name === 'string' && name !== '')
      files[field] = await resolveManifestPath(modelDir, name, `model.${field}`);
  }
  return files;
}

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
    throw archiveErrors.create.MARINA_ERR_ARCHIVE_PATH_ESCAPE(`${field} '${name}' ${reason ?? 'resolves outside the archive'}; archives may only name files inside themselves`, { details: { file: name } });
  }
  return path;
}

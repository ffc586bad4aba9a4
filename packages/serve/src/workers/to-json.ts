/**
 * JSON.stringify(value, null, 2), except that a Map becomes an object whose keys keep the Map's
 * order: a plain object would move integer-like keys ('7', '2') into ascending order, and
 * image_classifier's ranked labels are such keys when the archive has no index_to_name.json.
 */
export function toJson(value: unknown, indent = ''): string {
  // Most answers are plain JSON data: V8's native stringify then gives the same text, faster.
  if (indent === '' && isPlainJson(value, 0)) return JSON.stringify(value, null, 2) ?? 'null';
  return toJsonSlow(value, indent);
}

/** True when JSON.stringify(value, null, 2) prints what toJsonSlow would: no Map, bigint or symbol anywhere (toJSON objects are the native path's in both). */
function isPlainJson(value: unknown, depth: number): boolean {
  if (value === null) return true;
  const type = typeof value;
  if (type === 'bigint' || type === 'symbol') return false;
  if (type !== 'object') return true;
  if (depth > 64 || value instanceof Map) return false;
  if (typeof (value as { toJSON?: unknown }).toJSON === 'function') return true;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) if (!isPlainJson(value[i], depth + 1)) return false;
    return true;
  }
  if (ArrayBuffer.isView(value)) return false;
  for (const key in value as Record<string, unknown>) {
    if (!Object.hasOwn(value as object, key)) continue;
    if (!isPlainJson((value as Record<string, unknown>)[key], depth + 1)) return false;
  }
  return true;
}

function toJsonSlow(value: unknown, indent: string): string {
  const replace = (v: unknown): unknown => (typeof v === 'bigint' ? Number(v) : v);
  if (value instanceof Map) {
    if (value.size === 0) return '{}';
    const inner = `${indent}  `;
    const parts = [...value].map(([k, v]) => `${inner}${JSON.stringify(String(k))}: ${toJson(v, inner)}`);
    return `{\n${parts.join(',\n')}\n${indent}}`;
  }
  if (Array.isArray(value)) {
    if (value.length === 0) return '[]';
    const inner = `${indent}  `;
    return `[\n${value.map((v) => `${inner}${toJson(v === undefined || typeof v === 'function' ? null : v, inner)}`).join(',\n')}\n${indent}]`;
  }
  if (value && typeof value === 'object' && !(typeof (value as { toJSON?: unknown }).toJSON === 'function')) {
    const entries = Object.entries(value).filter(([, v]) => v !== undefined && typeof v !== 'function');
    if (entries.length === 0) return '{}';
    const inner = `${indent}  `;
    return `{\n${entries.map(([k, v]) => `${inner}${JSON.stringify(k)}: ${toJson(v, inner)}`).join(',\n')}\n${indent}}`;
  }
  const text = JSON.stringify(value, (_k, v: unknown) => replace(v), 2);
  return text === undefined ? 'null' : text.replace(/\n/g, `\n${indent}`);
}

/**
 * JSON.stringify(value, null, 2), except that a Map becomes an object whose keys keep the Map's
 * order: a plain object would move integer-like keys ('7', '2') into ascending order, and
 * image_classifier's ranked labels are such keys when the archive has no index_to_name.json.
 */
export function toJson(value: unknown, indent = ''): string {
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

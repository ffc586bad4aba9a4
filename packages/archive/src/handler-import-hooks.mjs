// Module resolution hooks for custom handlers (registered with node:module's register()).
// An archive is extracted to a cache folder with no node_modules above it, so a handler's
// bare import such as `import sharp from 'sharp'` would fail. When Node's own resolution
// finds nothing, these hooks resolve the bare specifier again as if it were imported from
// each fallback parent in turn (Marina's @marina/handlers package: sharp, onnxruntime-node),
// so handlers get the libraries Marina itself runs on. A package the archive ships in its own
// node_modules still wins, because Node's resolution runs first.
// Plain JavaScript on purpose: hooks run on Node's loader thread, where .ts cannot load.

/** @type {string[]} */
let fallbackParentURLs = [];

/** @param {{ fallbackParentURLs?: string[] } | undefined} data */
export function initialize(data) {
  fallbackParentURLs = Array.isArray(data?.fallbackParentURLs) ? data.fallbackParentURLs : [];
}

// Bare: not relative or absolute, no URL scheme (node:, file:, data:), not a '#' import map.
function isBare(specifier) {
  return !/^(\.{0,2}\/|[A-Za-z][A-Za-z\d+.-]*:|#)/.test(specifier);
}

export async function resolve(specifier, context, nextResolve) {
  try {
    return await nextResolve(specifier, context);
  } catch (error) {
    if (error?.code !== 'ERR_MODULE_NOT_FOUND' || !isBare(specifier)) throw error;
    for (const parentURL of fallbackParentURLs) {
      if (parentURL === context.parentURL) continue;
      try {
        return await nextResolve(specifier, { ...context, parentURL });
      } catch {
        // not there either; try the next fallback
      }
    }
    throw error;
  }
}

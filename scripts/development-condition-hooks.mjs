// Module resolution hook for running Marina's TypeScript sources from a clone (no build): every
// @marina/* import resolves with the 'development' export condition, which points at the
// package's src/ instead of its compiled dist/. Only @marina/* packages get the condition, so
// third-party packages load exactly as they do in production. Registered by scripts/run-sources.mjs.
export async function resolve(specifier, context, nextResolve) {
  if (!specifier.startsWith('@marina/') || context.conditions.includes('development'))
    return nextResolve(specifier, context);
  return nextResolve(specifier, { ...context, conditions: [...context.conditions, 'development'] });
}

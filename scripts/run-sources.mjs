// Development mode, for a clone of the repository: Marina's bins and worker threads run the
// TypeScript sources (src/*.ts) through tsx instead of the compiled dist/, so there is no build
// step to forget while working on the code. An installed package has no src/ and never loads this.
// Returns tsx's unregister function (the worker bootstrap unregisters tsx before custom handlers load).
import { register } from 'node:module';
import { register as registerTsx } from 'tsx/esm/api';

export function runSources() {
  register('./development-condition-hooks.mjs', import.meta.url);
  return registerTsx();
}

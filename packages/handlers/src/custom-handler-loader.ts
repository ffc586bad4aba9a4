import { access } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { closestName } from '@marina/errors';
import { builtinHandlerNames } from './builtin-handlers.ts';
import { createHandlerError } from './errors.ts';
import type { Handler } from './types.ts';

const handlerMethods = ['handle', 'initialize', 'preprocess', 'inference', 'postprocess'] as const;

function isHandlerLike(value: unknown): value is Handler {
  return (
    !!value &&
    typeof value === 'object' &&
    handlerMethods.some((m) => typeof (value as Record<string, unknown>)[m] === 'function')
  );
}

function isClass(value: unknown): value is new () => Handler {
  return typeof value === 'function' && /^class[\s{]/.test(Function.prototype.toString.call(value));
}

/**
 * Loads a custom handler from the extracted archive, TorchServe style: the handler string is
 * `file[.js|.mjs|.cjs][:fn]`; any folder part is dropped (the file sits at the archive root).
 * The module may provide, in this order of preference:
 * - `:fn` given → the named export `fn` is the handler's `handle(data, context)`
 *   (with the module's `initialize` export, if any);
 * - a default export that is a handler object, a class (instantiated with no arguments),
 *   or a factory `() => Handler | Promise<Handler>`;
 * - named exports `handle` / `initialize` / `preprocess` / `inference` / `postprocess`.
 * @throws MARINA_ERR_HANDLER_NOT_FOUND when no such file is in the archive,
 *         MARINA_ERR_HANDLER_INVALID when the module has none of the above.
 */
export async function loadCustomHandler(options: { handler: string; modelDir: string }): Promise<Handler> {
  const [spec, fnName] = options.handler.split(':') as [string, string | undefined];
  const file = basename(spec);
  const candidates = /\.(c|m)?js$/.test(file) ? [file] : [`${file}.js`, `${file}.mjs`, `${file}.cjs`];
  let path: string | undefined;
  for (const c of candidates) {
    try {
      await access(join(options.modelDir, c));
      path = join(options.modelDir, c);
      break;
    } catch {
      // try the next extension
    }
  }
  if (!path) {
    const closest = /[\\/.:]/.test(options.handler) ? undefined : closestName(options.handler, builtinHandlerNames);
    throw createHandlerError.MARINA_ERR_HANDLER_NOT_FOUND(
      `handler '${options.handler}' is not a built-in handler (${closest ? `did you mean '${closest}'? The built-in handlers are ` : ''}image_classifier, tensor) and the archive has no ${candidates.join(' / ')} at its root; pack the handler file with --handler`,
    );
  }
  const mod = (await import(pathToFileURL(path).href)) as Record<string, unknown>;
  if (fnName) {
    const fn = mod[fnName] ?? (mod.default as Record<string, unknown> | undefined)?.[fnName];
    if (typeof fn !== 'function')
      throw createHandlerError.MARINA_ERR_HANDLER_INVALID(
        `handler '${options.handler}': ${file} has no exported function '${fnName}'`,
      );
    const init = mod.initialize;
    return {
      handle: fn as Handler['handle'],
      ...(typeof init === 'function' ? { initialize: init as Handler['initialize'] } : {}),
    };
  }
  const def = mod.default;
  if (isHandlerLike(def)) return def;
  if (isClass(def)) return new def();
  if (typeof def === 'function' && !isHandlerLike(mod)) {
    const made = await (def as () => unknown)();
    if (isHandlerLike(made)) return made;
    throw createHandlerError.MARINA_ERR_HANDLER_INVALID(
      `handler '${options.handler}': the default export of ${file} is a function, but calling it did not return a handler object with handle() or inference()`,
    );
  }
  if (isHandlerLike(mod)) {
    const named: Handler = {};
    for (const m of handlerMethods) if (typeof mod[m] === 'function') (named as Record<string, unknown>)[m] = mod[m];
    return named;
  }
  throw createHandlerError.MARINA_ERR_HANDLER_INVALID(
    `handler '${options.handler}': ${file} exports no handler; export handle(data, context), a default handler object, a class, or a factory`,
  );
}

// Runs in a worker_thread: imports a custom handler module (user code, so never in the
// validator's own thread) and reports which parts of the handler contract it exports.
// Plain JavaScript on purpose: workers cannot load .ts on Node 20 and this needs no types.
import { register } from 'node:module';
import { pathToFileURL } from 'node:url';
import { parentPort, workerData } from 'node:worker_threads';

// Resolve a handler's bare imports (sharp, onnxruntime-node) the way the server's workers do:
// the module sits in an extracted archive with no node_modules above it.
register('./handler-import-hooks.mjs', import.meta.url, {
  data: { fallbackParentURLs: [import.meta.resolve('@marina/handlers/package.json')] },
});

const CONTRACT_METHODS = ['handle', 'inference'];

function methodNames(value) {
  const names = new Set();
  for (
    let object = value;
    object && object !== Object.prototype && object !== Function.prototype;
    object = Object.getPrototypeOf(object)
  ) {
    for (const name of Object.getOwnPropertyNames(object)) {
      if (name === 'constructor') continue;
      const descriptor = Object.getOwnPropertyDescriptor(object, name);
      if (descriptor && typeof descriptor.value === 'function') names.add(name);
    }
  }
  return [...names];
}

function describeExports(module) {
  const keys = Object.keys(module);
  return keys.length === 0 ? 'nothing' : keys.map((key) => `${key} (${typeof module[key]})`).join(', ');
}

function fulfils(methods) {
  return CONTRACT_METHODS.some((name) => methods.includes(name));
}

function isClass(fn) {
  return /^class[\s{]/.test(Function.prototype.toString.call(fn));
}

async function probe({ modulePath, functionName }) {
  let module;
  try {
    module = await import(pathToFileURL(modulePath).href);
  } catch (error) {
    return {
      status: 'import-failed',
      message: error instanceof Error ? `${error.name}: ${error.message}` : String(error),
    };
  }
  const exported = describeExports(module);
  const fallback = module.default;
  if (functionName) {
    const fn =
      typeof module[functionName] === 'function'
        ? module[functionName]
        : fallback && typeof fallback[functionName] === 'function'
          ? fallback[functionName]
          : undefined;
    if (fn) return { status: 'ok', shape: `function ${functionName}` };
    return { status: 'contract', message: `the module exports no function '${functionName}' (it exports ${exported})` };
  }
  if (fulfils(methodNames(module))) return { status: 'ok', shape: 'named exports' };
  if (fallback !== undefined && fallback !== null) {
    if (typeof fallback === 'object') {
      const methods = methodNames(fallback);
      if (fulfils(methods)) return { status: 'ok', shape: 'default object' };
      return {
        status: 'contract',
        message: `its default export is an object with ${methods.length === 0 ? 'no methods' : `only ${methods.join(', ')}`}, and no handle or inference method`,
      };
    }
    if (typeof fallback === 'function' && isClass(fallback)) {
      const methods = methodNames(fallback.prototype);
      if (fulfils(methods)) return { status: 'ok', shape: 'default class' };
      return {
        status: 'contract',
        message: `its default export is a class with ${methods.length === 0 ? 'no methods' : `only ${methods.join(', ')}`}, and no handle or inference method`,
      };
    }
    if (typeof fallback === 'function' && fallback.length >= 1)
      return { status: 'ok', shape: 'default function handle(data, context)' };
    if (typeof fallback === 'function') {
      let made;
      try {
        made = await fallback();
      } catch (error) {
        return {
          status: 'import-failed',
          message: `its default factory threw: ${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}`,
        };
      }
      if (made && typeof made === 'object' && fulfils(methodNames(made)))
        return { status: 'ok', shape: 'default factory' };
      return {
        status: 'contract',
        message: 'its default export is a zero-argument factory whose result has no handle or inference method',
      };
    }
  }
  return {
    status: 'contract',
    message: `it exports ${exported}: no handle or inference function, no default handler object, class or factory`,
  };
}

parentPort.postMessage(await probe(workerData));

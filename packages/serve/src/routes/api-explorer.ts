/**
 * A browsable page of the APIs on the management listener: `GET /api-explorer` lists every
 * described route of the inference, management and metrics listeners (from the same OpenAPI
 * documents as `OPTIONS /`) with a "Try it" button per route. The page talks only to its own
 * origin: `POST /api-explorer/try` replays the call on the chosen listener in-process
 * (`inject`), so the call passes that listener's own token check with the key typed in the page,
 * and no request ever leaves the server. The page loads nothing from elsewhere (strict CSP).
 */
import { randomBytes } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import type { ApiName } from '../api-name.ts';
import { isLoopbackHost } from '../config/parse-listen-address.ts';
import { createServeError } from '../errors.ts';
import { sendTorchServeError } from '../protocols/error-map.ts';
import { buildOpenApiOf } from './api-description.ts';

export interface ApiExplorerOptions {
  instances: Record<ApiName, FastifyInstance>;
  /** Which listeners are served (metrics only with enable_metrics_api). */
  apis: ApiName[];
  /** The host each listener binds, so the page never reaches a listener its clients could not reach themselves. */
  hosts: Record<ApiName, string>;
}

/**
 * Whether a client of the management listener may reach `target` through the page: always when
 * management binds loopback (its clients are local); otherwise only a listener bound to the same
 * host or to every interface. An inference listener kept on 127.0.0.1 stays private even when the
 * management one is public.
 */
export function isReachableFrom(managementHost: string, targetHost: string): boolean {
  if (isLoopbackHost(managementHost)) return true;
  return targetHost === managementHost || targetHost === '0.0.0.0' || targetHost === '::';
}

const trySchema = {
  type: 'object',
  required: ['api', 'method', 'path'],
  additionalProperties: false,
  properties: {
    api: { type: 'string', enum: ['inference', 'management', 'metrics'] },
    method: { type: 'string', enum: ['GET', 'POST', 'PUT', 'DELETE', 'OPTIONS'] },
    path: { type: 'string', pattern: '^/', maxLength: 2048 },
    authorization: { type: 'string', maxLength: 4096 },
    body: { type: 'string', maxLength: 1_000_000 },
    contentType: { type: 'string', maxLength: 200 },
  },
} as const;

/** The page: the documents are embedded as JSON; the script renders the list and the buttons. */
function renderPage(documents: Record<string, unknown>, nonce: string): string {
  // `<` escaped so no string in a description can close the script element.
  const data = JSON.stringify(documents).replace(/</g, '\\u003c');
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Marina API explorer</title>
<style nonce="${nonce}">
body { font: 14px/1.4 system-ui, sans-serif; margin: 2rem; color: #1b1b1b; }
h2 { margin-top: 2rem; border-bottom: 1px solid #ccc; }
li.route { list-style: none; margin: .6rem 0; padding: .4rem; border: 1px solid #e3e3e3; border-radius: 4px; }
.method { display: inline-block; min-width: 5rem; font-weight: bold; }
.path { font-family: monospace; }
input.path-input { font-family: monospace; width: 28rem; }
pre.result { background: #f6f6f6; padding: .4rem; white-space: pre-wrap; }
</style>
</head>
<body>
<h1>Marina API explorer</h1>
<p>Every route of this server's APIs, from the same OpenAPI documents as <code>OPTIONS /</code>. "Try it" sends the call to that API through this page's origin.</p>
<label>Authorization key (the inference or management key from key_file.json; empty when token authorization is off):
<input id="token" type="password" autocomplete="off"></label>
<div id="apis"></div>
<script nonce="${nonce}">
const documents = ${data};
const root = document.getElementById('apis');
for (const [api, doc] of Object.entries(documents)) {
  const section = document.createElement('section');
  section.dataset.api = api;
  const title = document.createElement('h2');
  title.textContent = api + ' API';
  section.appendChild(title);
  const list = document.createElement('ul');
  for (const [path, operations] of Object.entries(doc.paths)) {
    for (const [method, operation] of Object.entries(operations)) {
      const item = document.createElement('li');
      item.className = 'route';
      item.dataset.route = method.toUpperCase() + ' ' + path;
      const m = document.createElement('span'); m.className = 'method'; m.textContent = method.toUpperCase();
      const p = document.createElement('span'); p.className = 'path'; p.textContent = path;
      const d = document.createElement('div'); d.textContent = operation.description || '';
      const input = document.createElement('input'); input.className = 'path-input'; input.value = path;
      const body = document.createElement('textarea'); body.rows = 2; body.cols = 60; body.placeholder = 'request body (JSON)';
      const button = document.createElement('button'); button.type = 'button'; button.textContent = 'Try it';
      const out = document.createElement('pre'); out.className = 'result';
      button.addEventListener('click', async () => {
        out.textContent = '...';
        const token = document.getElementById('token').value;
        const payload = { api, method: method.toUpperCase(), path: input.value };
        if (token) payload.authorization = 'Bearer ' + token;
        if (body.value) { payload.body = body.value; payload.contentType = 'application/json'; }
        const response = await fetch('/api-explorer/try', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(payload) });
        const answer = await response.json();
        out.dataset.status = String(answer.statusCode);
        out.textContent = answer.statusCode + '\\n' + answer.body;
      });
      item.append(m, p, d, input, body, button, out);
      list.appendChild(item);
    }
  }
  section.appendChild(list);
  root.appendChild(section);
}
</script>
</body>
</html>
`;
}

/** Registers `GET /api-explorer` and `POST /api-explorer/try` (open: each replayed call is authorized by its own listener). */
export async function apiExplorerRoutes(app: FastifyInstance, options: ApiExplorerOptions): Promise<void> {
  app.get(
    '/api-explorer',
    {
      schema: { description: 'A browsable page of every API route, with "Try it" buttons.' } as object,
      config: { auth: 'none' },
    },
    async (_request, reply) => {
      const nonce = randomBytes(16).toString('base64');
      const documents = Object.fromEntries(options.apis.map((api) => [api, buildOpenApiOf(options.instances[api])]));
      return (
        reply
          .header(
            'content-security-policy',
            `default-src 'none'; script-src 'nonce-${nonce}'; style-src 'nonce-${nonce}'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'`,
          )
          // No other site may frame the page (clickjacking its "Try it" buttons); X-Frame-Options for browsers without CSP 2.
          .header('x-frame-options', 'DENY')
          .header('x-content-type-options', 'nosniff')
          .type('text/html; charset=utf-8')
          .send(renderPage(documents, nonce))
      );
    },
  );

  app.post(
    '/api-explorer/try',
    {
      schema: {
        description:
          'Replays one call of the explorer page on the chosen API listener (in-process) and returns its status and body.',
        body: trySchema,
      } as object,
      config: { auth: 'none' },
    },
    async (request, reply) => {
      const call = request.body as {
        api: ApiName;
        method: 'GET' | 'POST' | 'PUT' | 'DELETE' | 'OPTIONS';
        path: string;
        authorization?: string;
        body?: string;
        contentType?: string;
      };
      // call.api is one of the schema's three names: safe to echo.
      if (!options.apis.includes(call.api))
        return sendTorchServeError(
          reply,
          createServeError.MARINA_ERR_BAD_REQUEST(`The ${call.api} API is not served here.`),
        );
      if (!isReachableFrom(options.hosts.management, options.hosts[call.api]))
        return sendTorchServeError(
          reply,
          createServeError.MARINA_ERR_API_EXPLORER_UNREACHABLE(
            `The ${call.api} API listens on ${options.hosts[call.api]}, which clients of the management address cannot reach; the explorer does not relay to it.`,
          ),
        );
      if (call.path.startsWith('/api-explorer'))
        return sendTorchServeError(
          reply,
          createServeError.MARINA_ERR_BAD_REQUEST('The explorer does not call itself.'),
        );
      const headers: Record<string, string> = {};
      if (call.authorization) headers.authorization = call.authorization;
      if (call.contentType) headers['content-type'] = call.contentType;
      const answer = await options.instances[call.api].inject({
        method: call.method,
        url: call.path,
        headers,
        ...(call.body !== undefined ? { payload: call.body } : {}),
      });
      return reply.send({
        statusCode: answer.statusCode,
        contentType: answer.headers['content-type'] ?? null,
        body: answer.body,
      });
    },
  );
}

#!/usr/bin/env node
// The overhead baseline: a bare fastify route that accepts the same POST body and returns a
// constant, in its own process like the server. Prints {"port": N} once listening.
import Fastify from 'fastify';

const app = Fastify({ logger: false, bodyLimit: 64 * 1024 * 1024 });
app.addContentTypeParser('*', { parseAs: 'buffer' }, (_request, body, done) => done(null, body));
const constant = { tabby: 0.5, tiger_cat: 0.3, Egyptian_cat: 0.1, lynx: 0.05, Persian_cat: 0.05 };
app.post('/predictions/:model', async () => constant);
app.get('/ping', async () => ({ status: 'Healthy' }));
await app.listen({ host: '127.0.0.1', port: 0 });
process.stdout.write(`${JSON.stringify({ port: app.server.address().port })}\n`);
process.on('SIGTERM', () => app.close().then(() => process.exit(0)));

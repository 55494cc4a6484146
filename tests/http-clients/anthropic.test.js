// moelsp serve through the official `@anthropic-ai/sdk` npm package (pinned
// in package-lock.json), as Claude Code reaches it: /v1/messages streamed
// and not, count_tokens, x-api-key, Anthropic's error shapes.
//   MOELSP_BINARY=build/cli/moelsp node --test tests/http-clients/
const { test, before, after } = require('node:test');
const assert = require('node:assert');
let Anthropic;
try {
  Anthropic = require('@anthropic-ai/sdk');
  Anthropic = Anthropic.Anthropic ?? Anthropic.default ?? Anthropic;
} catch (e) {
  throw new Error(`the @anthropic-ai/sdk package is not installed: run npm ci in tests/http-clients (tools/setup.sh test does): ${e.message}`);
}
const { startServer } = require('./serve.js');

let server, client, port;

before(async () => {
  ({ proc: server, port } = await startServer(['--api-key', 'test-key']));
  client = new Anthropic({ baseURL: `http://127.0.0.1:${port}`, apiKey: 'test-key', maxRetries: 0 });
});

after(() => server && server.kill('SIGTERM'));

// Claude Code asks for its own model names: answered by the loaded model.
const model = 'claude-sonnet-4-5';
const req = { model, max_tokens: 16, temperature: 0, system: 'Answer briefly.', messages: [{ role: 'user', content: 'What is a tuple?' }] };

test('messages: a text answer with the name echoed, stop_reason and usage', async () => {
  const m = await client.messages.create(req);
  assert.strictEqual(m.type, 'message');
  assert.strictEqual(m.model, model);
  assert.ok(['end_turn', 'max_tokens'].includes(m.stop_reason), m.stop_reason);
  assert.ok(m.content.length >= 1 && m.content.at(-1).type === 'text');
  assert.ok(m.usage.input_tokens + m.usage.cache_read_input_tokens > 0 && m.usage.output_tokens > 0);
});

test('messages streamed: the events in order give the same greedy text', async () => {
  const plain = await client.messages.create(req);
  const types = [];
  let text = '';
  for await (const e of await client.messages.create({ ...req, stream: true })) {
    types.push(e.type);
    if (e.type === 'content_block_delta' && e.delta.type === 'text_delta') text += e.delta.text;
  }
  assert.strictEqual(types[0], 'message_start');
  assert.ok(types.includes('content_block_start') && types.includes('content_block_stop'));
  assert.deepStrictEqual(types.slice(-2), ['message_delta', 'message_stop']);
  assert.strictEqual(text, plain.content.filter((b) => b.type === 'text').map((b) => b.text).join(''));
  // The SDK's own accumulation of the stream agrees.
  const final = await client.messages.stream(req).finalMessage();
  assert.strictEqual(final.stop_reason, plain.stop_reason);
});

test('messages: a tool_use and its tool_result in the history, with tools, are accepted', async () => {
  const tools = [{ name: 'read_file', description: 'Read a file', input_schema: { type: 'object', properties: { path: { type: 'string' } } } }];
  const m = await client.messages.create({
    model, max_tokens: 8, temperature: 0, tools, metadata: { user_id: 'u' },
    messages: [
      { role: 'user', content: [{ type: 'text', text: 'First line of notes.txt?', cache_control: { type: 'ephemeral' } }] },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'read_file', input: { path: 'notes.txt' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'hello' }] },
    ],
  });
  assert.strictEqual(m.type, 'message');
});

test('count_tokens counts the prompt the same request would make', async () => {
  const short = await client.messages.countTokens({ model, messages: [{ role: 'user', content: 'hi' }] });
  const long = await client.messages.countTokens({ model, messages: [{ role: 'user', content: 'hi '.repeat(50) }] });
  assert.ok(short.input_tokens > 0 && long.input_tokens > short.input_tokens + 20);
});

test('errors come in Anthropic\'s shape: a wrong x-api-key, a missing max_tokens', async () => {
  const bad = new Anthropic({ baseURL: client.baseURL, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.messages.create(req), (e) => e.status === 401 && e.error?.error?.type === 'authentication_error');
  const r = await fetch(`http://127.0.0.1:${port}/v1/messages?beta=true`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': 'test-key' },
    body: JSON.stringify({ model, messages: req.messages }),
  });
  const body = await r.json();
  assert.strictEqual(r.status, 400);
  assert.strictEqual(body.type, 'error');
  assert.strictEqual(body.error.type, 'invalid_request_error');
  assert.match(body.error.message, /max_tokens/);
});

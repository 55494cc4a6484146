// moelsp serve through the official `openai` npm package (pinned in
// package-lock.json): models, completions, chat and responses, streaming
// and not.
//   MOELSP_BINARY=build/cli/moelsp node --test tests/http-clients/
const { test, before, after } = require('node:test');
const assert = require('node:assert');
let OpenAI;
try {
  ({ OpenAI } = require('openai'));
} catch (e) {
  throw new Error(`the openai package is not installed: run npm ci in tests/http-clients (tools/setup.sh test does): ${e.message}`);
}

const { startServer } = require('./serve.js');

let server, client;

before(async () => {
  const { proc, port } = await startServer(['--api-key', 'test-key']);
  server = proc;
  client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'test-key', maxRetries: 0 });
});

after(() => server && server.kill('SIGTERM'));

let model = '';
test('models.list names the loaded model', async () => {
  const page = await client.models.list();
  assert.ok(page.data.length === 1 && page.data[0].id);
  model = page.data[0].id;
});

test('without --served-model-name any model name is answered by the loaded model and echoed', async () => {
  const r = await client.completions.create({ model: 'gpt-5-codex', prompt: 'x', max_tokens: 1 });
  assert.strictEqual(r.model, 'gpt-5-codex');
});

test('completions: plain and streamed give the same greedy text', async () => {
  const req = { model, prompt: 'def fibonacci(n):', max_tokens: 12, temperature: 0 };
  const plain = await client.completions.create(req);
  assert.ok(plain.choices[0].text.length > 0);
  assert.ok(plain.usage.completion_tokens > 0);
  let streamed = '';
  for await (const chunk of await client.completions.create({ ...req, stream: true })) streamed += chunk.choices[0].text;
  assert.strictEqual(streamed, plain.choices[0].text);
});

test('chat: plain and streamed give the same greedy answer', async () => {
  const req = { model, messages: [{ role: 'user', content: 'What is a tuple?' }], max_tokens: 16, temperature: 0 };
  const plain = await client.chat.completions.create(req);
  assert.strictEqual(plain.choices[0].message.role, 'assistant');
  let streamed = '';
  for await (const chunk of await client.chat.completions.create({ ...req, stream: true }))
    streamed += chunk.choices[0]?.delta?.content ?? '';
  assert.strictEqual(streamed, plain.choices[0].message.content);
});

test('a wrong key is refused with the SDK\'s AuthenticationError', async () => {
  const bad = new OpenAI({ baseURL: client.baseURL, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e.status === 401);
});

test('responses: plain and streamed give the same greedy answer, with the API\'s events in order', async () => {
  const req = { model, instructions: 'Answer briefly.', input: 'What is a tuple?', max_output_tokens: 16, temperature: 0 };
  const plain = await client.responses.create(req);
  assert.ok(['completed', 'incomplete'].includes(plain.status), plain.status);
  assert.ok(plain.output_text.length > 0);
  assert.ok(plain.usage.input_tokens > 0 && plain.usage.output_tokens > 0);
  const types = [];
  let streamed = '', last;
  for await (const e of await client.responses.create({ ...req, stream: true })) {
    types.push(e.type);
    if (e.type === 'response.output_text.delta') streamed += e.delta;
    assert.strictEqual(e.sequence_number, types.length - 1);
    last = e;
  }
  assert.deepStrictEqual(types.slice(0, 2), ['response.created', 'response.in_progress']);
  assert.ok(types.includes('response.output_item.added') && types.includes('response.output_item.done'));
  assert.ok(['response.completed', 'response.incomplete'].includes(last.type), last.type);
  assert.strictEqual(last.response.output_text ?? last.response.output.at(-1).content[0].text, plain.output_text);
  assert.strictEqual(streamed, plain.output_text);
});

test('responses: a function_call and its output in the input are read as a tool turn', async () => {
  const tools = [{ type: 'function', name: 'read_file', parameters: { type: 'object', properties: { path: { type: 'string' } } } }];
  const r = await client.responses.create({
    model, tools, max_output_tokens: 8, temperature: 0,
    input: [
      { role: 'user', content: 'First line of notes.txt?' },
      { type: 'function_call', call_id: 'c1', name: 'read_file', arguments: '{"path":"notes.txt"}' },
      { type: 'function_call_output', call_id: 'c1', output: 'hello' },
    ],
  });
  assert.ok(r.usage.input_tokens > 0);
});

test('responses: previous_response_id is refused (no responses are kept)', async () => {
  await assert.rejects(client.responses.create({ model, input: 'x', previous_response_id: 'resp_1' }),
    (e) => e.status === 400 && e.param === 'previous_response_id');
});

// moelsp serve through the official `openai` npm package (pinned in
// package-lock.json): models, completions and chat, streaming and not.
//   MOELSP_BINARY=build/server/moelsp node --test tests/http-clients/
const { test, before, after } = require('node:test');
const assert = require('node:assert');
const { spawn } = require('node:child_process');
let OpenAI;
try {
  ({ OpenAI } = require('openai'));
} catch (e) {
  throw new Error(`the openai package is not installed: run npm ci in tests/http-clients (tools/setup.sh test does): ${e.message}`);
}

let server, client;

before(async () => {
  const binary = process.env.MOELSP_BINARY;
  assert.ok(binary, 'MOELSP_BINARY must be set');
  server = spawn(binary, ['serve', '--port', '0', '--api-key', 'test-key'], { stdio: ['ignore', 'ignore', 'pipe'] });
  const port = await new Promise((resolve, reject) => {
    let err = '';
    server.stderr.on('data', (d) => {
      err += d;
      const m = /listening on http:\/\/[\d.]+:(\d+)/.exec(err);
      if (m) resolve(Number(m[1]));
    });
    server.on('exit', (code) => reject(new Error(`moelsp serve exited ${code}: ${err}`)));
  });
  client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'test-key', maxRetries: 0 });
  for (let i = 0; i < 300; i++) {  // /health is 503 while the model loads
    const r = await fetch(`http://127.0.0.1:${port}/health`).catch(() => null);
    if (r && r.status === 200) return;
    await new Promise((res) => setTimeout(res, 200));
  }
  throw new Error('the model did not load');
});

after(() => server && server.kill('SIGTERM'));

let model = '';
test('models.list names the loaded model', async () => {
  const page = await client.models.list();
  assert.ok(page.data.length === 1 && page.data[0].id);
  model = page.data[0].id;
});

test('a model the server does not serve is a 404 naming the one it does', async () => {
  await assert.rejects(client.completions.create({ model: 'no-such-model', prompt: 'x', max_tokens: 1 }),
    (e) => e.status === 404 && e.code === 'model_not_found' && e.message.includes(model));
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

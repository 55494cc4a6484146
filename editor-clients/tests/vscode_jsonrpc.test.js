// moelsp driven by vscode-jsonrpc + vscode-languageserver-protocol, the
// libraries VS Code's language client is built on: initialize, inline
// completion, chat streamed through $/progress, cancellation.
// Run by ctest (tests/CMakeLists.txt) with MOELSP_BINARY and MOELSP_TEST_DATA set.
'use strict';
const test = require('node:test');
const assert = require('node:assert');
const path = require('node:path');
const { spawn } = require('node:child_process');
const rpc = require('vscode-jsonrpc/node');
const proto = require('vscode-languageserver-protocol');

const binary = process.env.MOELSP_BINARY;
const data = process.env.MOELSP_TEST_DATA;
assert.ok(binary && data, 'MOELSP_BINARY and MOELSP_TEST_DATA must be set');
const model = path.join(data, 'reference', 'qwen3moe-ref.gguf');

function start() {
  const child = spawn(binary, ['lsp'], { stdio: ['pipe', 'pipe', 'pipe'] });
  child.stderr.on('data', () => {});  // logs go to stderr, never to the protocol stream
  const conn = rpc.createMessageConnection(new rpc.StreamMessageReader(child.stdout),
                                           new rpc.StreamMessageWriter(child.stdin));
  const statuses = [];
  let ready;
  const readyPromise = new Promise((resolve, reject) => { ready = { resolve, reject }; });
  conn.onNotification('moelsp/status', (s) => {
    statuses.push(s);
    if (s.state === 'ready') ready.resolve(s);
    if (s.state === 'error') ready.reject(new Error(s.message));
  });
  conn.onNotification('window/logMessage', () => {});
  conn.onRequest('window/workDoneProgress/create', () => null);
  conn.listen();
  return { child, conn, statuses, ready: readyPromise };
}

async function initialize(conn, extra = {}) {
  const res = await conn.sendRequest('initialize', {
    processId: process.pid,
    rootUri: null,
    capabilities: {
      textDocument: { completion: {}, inlineCompletion: {} },
      workspace: { executeCommand: {} },
      window: { workDoneProgress: true },
    },
    initializationOptions: Object.assign({ model, threads: 2, contextSize: 1024,
                                           completion: { maxTokens: 8, timeBudgetMs: 5000 },
                                           chat: { maxTokens: 12, template: 'chatml' } }, extra),
  });
  await conn.sendNotification('initialized', {});
  return res;
}

async function stop({ child, conn }) {
  await conn.sendRequest('shutdown');
  const exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
  await conn.sendNotification('exit');
  const code = await exited;
  conn.dispose();
  return code;
}

const uri = 'file:///project/area.py';
const text = 'def area(w, h):\n    """Rectangle area."""\n    return ';

test('initialize, inline completion, classic completion, shutdown', async () => {
  const s = start();
  const init = await initialize(s.conn);
  assert.ok(init.capabilities.inlineCompletionProvider !== undefined);
  assert.ok(init.capabilities.completionProvider);
  assert.strictEqual(init.serverInfo.name, 'moelsp');
  await s.ready;
  await s.conn.sendNotification('textDocument/didOpen', { textDocument: { uri, languageId: 'python', version: 1, text } });
  const inline = await s.conn.sendRequest('textDocument/inlineCompletion', {
    textDocument: { uri }, position: { line: 2, character: 11 }, context: { triggerKind: 2 } });
  assert.ok(Array.isArray(inline.items));
  for (const item of inline.items) {
    assert.strictEqual(typeof item.insertText, 'string');
    assert.ok(item.insertText.length > 0);
    assert.deepStrictEqual(item.range.start, { line: 2, character: 11 });
  }
  const classic = await s.conn.sendRequest('textDocument/completion', {
    textDocument: { uri }, position: { line: 2, character: 11 } });
  assert.ok(Array.isArray(classic.items));
  for (const item of classic.items) assert.ok(item.label.length > 0);
  const status = await s.conn.sendRequest('moelsp/status');
  assert.strictEqual(status.state, 'ready');
  assert.ok(status.completions.requests >= 2);
  assert.strictEqual(await stop(s), 0);
});

test('chat streams partial results as $/progress', async () => {
  const s = start();
  await initialize(s.conn);
  await s.ready;
  let streamed = '';
  const token = 'chat-1';
  s.conn.onProgress(new proto.ProgressType(), token, (v) => { streamed += v.text; });
  const res = await s.conn.sendRequest('moelsp/chat', {
    messages: [{ role: 'user', content: 'Write a Python function that adds two numbers.' }],
    partialResultToken: token });
  assert.strictEqual(typeof res.text, 'string');
  assert.ok(res.text.length > 0);
  assert.strictEqual(streamed, res.text);
  assert.ok(['length', 'eos', 'stop'].includes(res.finishReason));
  assert.strictEqual(await stop(s), 0);
});

test('cancellation answers RequestCancelled and the server keeps serving', async () => {
  const s = start();
  // A long debounce holds the request (a long generation no longer does: the
  // random model's text turns into a loop, which ends decoding early).
  await initialize(s.conn, { completion: { maxTokens: 100000, timeBudgetMs: 600000, debounceMs: 600000 } });
  await s.ready;
  await s.conn.sendNotification('textDocument/didOpen', { textDocument: { uri, languageId: 'python', version: 1, text } });
  const source = new rpc.CancellationTokenSource();
  const pending = s.conn.sendRequest('textDocument/inlineCompletion', {
    textDocument: { uri }, position: { line: 2, character: 11 }, context: { triggerKind: 2 } }, source.token);
  setTimeout(() => source.cancel(), 50);
  await assert.rejects(pending, (err) => err.code === proto.LSPErrorCodes.RequestCancelled);
  const status = await s.conn.sendRequest('moelsp/status');
  assert.strictEqual(status.state, 'ready');
  assert.strictEqual(await stop(s), 0);
});

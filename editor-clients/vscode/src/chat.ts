// The chat view in the sidebar: a webview that streams moelsp/chat answers.
//
// The conversation lives here, in the extension (the webview may be hidden
// and shown again): every question is sent with the turns before it. The
// current selection (or the whole file when nothing is selected) goes along
// as context when the box under the input is ticked; the server fits it to
// the model's context. The answer streams as $/progress on a
// partialResultToken, one piece of text per report.
//
// Explain / Fix / Document send moelsp/chat with their kind and the code:
// the server words the question, the view shows a label for it, and the
// result's question (the server's wording and the code) is the turn the
// follow-ups carry.
import * as crypto from 'crypto';
import * as vscode from 'vscode';
import { LanguageClient, ProgressType } from 'vscode-languageclient/node';

export interface ChatTurn {
  role: 'user' | 'assistant';
  content: string;
  shown?: string;  // what the view shows instead of content (a command's label)
}

interface ChatResult {
  text: string;
  finishReason: string;
  tokensPerSecond: number;
  question?: string;  // explain, fix, document: the user's turn as the server asked it
}

// The commands the server asks about code (moelsp/chat's kind).
export type CodeKind = 'explain' | 'fix' | 'document';
const KIND_LABEL: Record<CodeKind, string> = { explain: 'Explain', fix: 'Fix', document: 'Document' };

export interface CodeContext {
  uri?: string;
  range?: { start: { line: number; character: number }; end: { line: number; character: number } };
  // Instead of uri and range: the text itself, of a document the server does
  // not have (a scheme outside the documentSelector's: a diff's other side).
  code?: string;
  language?: string;
  label: string;
}

const progressType = new ProgressType<{ text?: string }>();

export class ChatViewProvider implements vscode.WebviewViewProvider {
  static readonly viewId = 'moelsp.chat';
  private view?: vscode.WebviewView;
  private turns: ChatTurn[] = [];
  private running?: vscode.CancellationTokenSource;
  private pending: Array<() => void> = [];  // work waiting for the view to exist

  constructor(
    private readonly client: () => LanguageClient | undefined,
    private readonly busy: { begin(): void; end(): void },
  ) {}

  resolveWebviewView(view: vscode.WebviewView) {
    this.view = view;
    view.webview.options = { enableScripts: true };
    view.webview.html = this.html(view.webview);
    view.webview.onDidReceiveMessage((m) => this.onMessage(m));
    view.onDidDispose(() => (this.view = undefined));
  }

  // Opens the view, then asks the server's question of this kind about the
  // code (the Explain/Fix/Document commands come here).
  async askFromEditor(kind: CodeKind, ctx: CodeContext) {
    await vscode.commands.executeCommand(`${ChatViewProvider.viewId}.focus`);
    await this.whenReady();
    await this.ask(KIND_LABEL[kind], ctx, kind);
  }

  clear() {
    this.running?.cancel();
    this.turns = [];
    this.post({ type: 'clear' });
  }

  private whenReady(): Promise<void> {
    if (this.view) return Promise.resolve();
    return new Promise((resolve) => this.pending.push(resolve));
  }

  private post(m: unknown) {
    void this.view?.webview.postMessage(m);
  }

  private async onMessage(m: any) {
    if (m.type === 'ready') {
      this.post({ type: 'history', turns: this.turns.map((t) => ({ role: t.role, content: t.shown ?? t.content })) });
      for (const f of this.pending.splice(0)) f();
    } else if (m.type === 'ask' && typeof m.text === 'string' && m.text.trim()) {
      await this.ask(m.text.trim(), m.withContext ? editorContext() : undefined);
    } else if (m.type === 'stop') {
      this.running?.cancel();
    } else if (m.type === 'clear') {
      this.clear();
    }
  }

  // question: the user's words, or for a kind other than chat the label the
  // view shows for the server's question.
  async ask(question: string, ctx?: CodeContext, kind: CodeKind | 'chat' = 'chat') {
    const client = this.client();
    if (!client || !client.isRunning()) {
      this.post({ type: 'error', message: 'The moelsp server is not running (see the status bar item).' });
      return;
    }
    this.running?.cancel();
    const cts = (this.running = new vscode.CancellationTokenSource());
    this.post({ type: 'user', text: question, context: ctx?.label });
    this.post({ type: 'start' });
    const token = `moelsp-chat-${crypto.randomUUID()}`;
    let streamed = '';
    const sub = client.onProgress(progressType, token, (v) => {
      if (typeof v?.text !== 'string') return;
      streamed += v.text;
      this.post({ type: 'delta', text: v.text });
    });
    // A chat sends the conversation and the question; a command only its
    // kind and the code (the server asks its own question).
    const params: Record<string, unknown> =
      kind === 'chat'
        ? { messages: [...this.turns.map(({ role, content }) => ({ role, content })), { role: 'user', content: question }] }
        : { kind };
    params.partialResultToken = token;
    if (ctx?.uri) {
      params.uri = ctx.uri;
      if (ctx.range) params.range = ctx.range;
    } else if (ctx?.code !== undefined) {
      params.code = ctx.code;
      params.language = ctx.language;
    }
    this.busy.begin();
    try {
      const r = await client.sendRequest<ChatResult>('moelsp/chat', params, cts.token);
      const text = r?.text ?? streamed;
      // The turn is kept once answered (a failed one stays on screen, not
      // in the model's history); a command's is the server's question.
      const asked = kind === 'chat' ? question : r?.question;
      if (asked !== undefined)
        this.turns.push(
          { role: 'user', content: asked, ...(kind === 'chat' ? {} : { shown: question }) },
          { role: 'assistant', content: text },
        );
      this.post({ type: 'done', text, info: `${r.finishReason} · ${r.tokensPerSecond.toFixed(1)} tok/s` });
    } catch (e: any) {
      const cancelled = cts.token.isCancellationRequested || e?.code === -32800;
      this.post({ type: 'error', message: cancelled ? 'stopped' : `moelsp: ${e?.message ?? e}` });
    } finally {
      this.busy.end();
      sub.dispose();
      if (this.running === cts) this.running = undefined;
    }
  }

  private html(webview: vscode.Webview): string {
    const nonce = crypto.randomBytes(16).toString('base64');
    const csp = `default-src 'none'; style-src ${webview.cspSource} 'unsafe-inline'; script-src 'nonce-${nonce}';`;
    return `<!DOCTYPE html>
<html><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" content="${csp}">
<style>
  body { font-family: var(--vscode-font-family); font-size: var(--vscode-font-size); color: var(--vscode-foreground); padding: 0 8px; }
  #log { display: flex; flex-direction: column; gap: 8px; padding-bottom: 8px; }
  .turn { white-space: pre-wrap; word-break: break-word; padding: 6px 8px; border-radius: 4px; }
  .user { background: var(--vscode-input-background); }
  .assistant { font-family: var(--vscode-editor-font-family); font-size: var(--vscode-editor-font-size); }
  .ctx, .info { opacity: .7; font-size: 90%; }
  .error { color: var(--vscode-errorForeground); }
  textarea { width: 100%; box-sizing: border-box; min-height: 4em; color: var(--vscode-input-foreground);
             background: var(--vscode-input-background); border: 1px solid var(--vscode-input-border, transparent); }
  .row { display: flex; gap: 6px; align-items: center; margin-top: 4px; }
  button { color: var(--vscode-button-foreground); background: var(--vscode-button-background); border: 0; padding: 4px 10px; }
</style></head>
<body>
<div id="log" aria-live="polite"></div>
<textarea id="q" placeholder="Ask moelsp (Enter sends, Shift+Enter for a new line)"></textarea>
<div class="row">
  <button id="send">Send</button><button id="stop" hidden>Stop</button>
  <label><input type="checkbox" id="ctx" checked> with the selection or file</label>
</div>
<script nonce="${nonce}">
  const vscode = acquireVsCodeApi();
  const log = document.getElementById('log'), q = document.getElementById('q');
  const send = document.getElementById('send'), stop = document.getElementById('stop'), ctx = document.getElementById('ctx');
  let answer = null;
  function add(cls, text) {
    const d = document.createElement('div'); d.className = 'turn ' + cls; d.textContent = text; log.appendChild(d);
    d.scrollIntoView({ block: 'end' }); return d;
  }
  function ask() {
    const text = q.value.trim(); if (!text) return;
    vscode.postMessage({ type: 'ask', text, withContext: ctx.checked }); q.value = '';
  }
  send.onclick = ask;
  stop.onclick = () => vscode.postMessage({ type: 'stop' });
  q.addEventListener('keydown', (e) => { if (e.key === 'Enter' && !e.shiftKey) { e.preventDefault(); ask(); } });
  window.addEventListener('message', (ev) => {
    const m = ev.data;
    if (m.type === 'history') { log.textContent = ''; for (const t of m.turns) add(t.role, t.content); }
    else if (m.type === 'clear') log.textContent = '';
    else if (m.type === 'user') { const d = add('user', m.text); if (m.context) { const c = document.createElement('div'); c.className = 'ctx'; c.textContent = 'context: ' + m.context; d.appendChild(c); } }
    else if (m.type === 'start') { answer = add('assistant streaming', ''); send.hidden = true; stop.hidden = false; }
    else if (m.type === 'delta' && answer) {
      answer.textContent += m.text; answer.dataset.pieces = String(Number(answer.dataset.pieces || 0) + 1);
      answer.scrollIntoView({ block: 'end' });
    }
    else if (m.type === 'done' || m.type === 'error') {
      if (answer) {
        answer.classList.remove('streaming');
        if (m.type === 'done') { answer.textContent = m.text; const i = document.createElement('div'); i.className = 'info'; i.textContent = m.info; answer.appendChild(i); }
      }
      if (m.type === 'error') add('error', m.message);
      answer = null; send.hidden = false; stop.hidden = true;
    }
  });
  vscode.postMessage({ type: 'ready' });
</script>
</body></html>`;
  }
}

// The active editor's selection, or its whole file when nothing is selected.
export function editorContext(): CodeContext | undefined {
  const ed = vscode.window.activeTextEditor;
  if (!ed) return undefined;
  const doc = ed.document;
  const name = vscode.workspace.asRelativePath(doc.uri);
  const s = ed.selection;
  const label = s.isEmpty ? name : `${name}:${s.start.line + 1}-${s.end.line + 1}`;
  if (doc.uri.scheme !== 'file' && doc.uri.scheme !== 'untitled')
    return { code: doc.getText(s.isEmpty ? undefined : s), language: doc.languageId, label };
  if (s.isEmpty) return { uri: doc.uri.toString(), label };
  return {
    uri: doc.uri.toString(),
    range: { start: { line: s.start.line, character: s.start.character }, end: { line: s.end.line, character: s.end.character } },
    label,
  };
}

// moelsp for VS Code: starts `moelsp lsp`, and VS Code's language client
// (vscode-languageclient 11) turns the server's inlineCompletionProvider into
// ghost text. Around that: the status bar item, the output channel with the
// server's log, the chat view, and the editor commands.
import * as vscode from 'vscode';
import {
  LanguageClient,
  LanguageClientOptions,
  RevealOutputChannelOn,
  ServerOptions,
  State as ClientState,
} from 'vscode-languageclient/node';

import { ChatViewProvider, CodeKind, editorContext } from './chat';
import { DefinitionFeed, VisibleRangesFeed } from './definitions';
import { ModelPicker } from './models';
import { enableObject, enabledFor, findBinary, SERVER_KEYS, serverSettings } from './settings';
import { ServerStatus, StatusBar } from './status';

let client: LanguageClient | undefined;
let output: vscode.LogOutputChannel;
let status: StatusBar;
let chat: ChatViewProvider;
let extensionPath = '';
let lastError = '';
let refreshTimer: NodeJS.Timeout | undefined;
let definitions: DefinitionFeed;
let visibleRanges: VisibleRangesFeed;
let models: ModelPicker;

export async function activate(context: vscode.ExtensionContext) {
  extensionPath = context.extensionPath;
  output = vscode.window.createOutputChannel('moelsp', { log: true });
  status = new StatusBar(scheduleStatusRefresh);
  renderEnabled();
  chat = new ChatViewProvider(() => client, status);
  definitions = new DefinitionFeed(() => client);
  visibleRanges = new VisibleRangesFeed(() => client);
  models = new ModelPicker(() => client);
  const cmd = (id: string, fn: (...a: any[]) => unknown) => vscode.commands.registerCommand(id, fn);
  context.subscriptions.push(
    output,
    status,
    vscode.window.registerWebviewViewProvider(ChatViewProvider.viewId, chat, {
      webviewOptions: { retainContextWhenHidden: true },
    }),
    cmd('moelsp.showMenu', showMenu),
    cmd('moelsp.showStatus', showStatus),
    cmd('moelsp.toggleCompletions', toggleCompletions),
    cmd('moelsp.toggleLanguage', toggleLanguage),
    cmd('moelsp.toggleManual', toggleManual),
    cmd('moelsp.snoozeCompletions', snooze),
    cmd('moelsp.resumeCompletions', () => serverCommand('moelsp.resume')),
    vscode.window.onDidChangeActiveTextEditor(renderEnabled),
    vscode.workspace.onDidCloseTextDocument((d) => definitions.forget(d)),
    vscode.window.onDidChangeTextEditorVisibleRanges((e) => visibleRanges.update(e.textEditor)),
    vscode.window.onDidChangeVisibleTextEditors((eds) => visibleRanges.visible(eds)),
    cmd('moelsp.openChat', () => vscode.commands.executeCommand(`${ChatViewProvider.viewId}.focus`)),
    cmd('moelsp.chooseModel', () => models.choose()),
    cmd('moelsp.restart', restart),
    cmd('moelsp.showLogs', () => output.show(true)),
    cmd('moelsp.clearChat', () => chat.clear()),
    // The server words these questions (moelsp/chat's kind): every editor asks the same.
    cmd('moelsp.explainSelection', () => askAboutSelection('explain')),
    cmd('moelsp.fixSelection', () => askAboutSelection('fix')),
    cmd('moelsp.documentSelection', () => askAboutSelection('document')),
    vscode.workspace.onDidChangeConfiguration(onConfigurationChanged),
    vscode.workspace.registerTextDocumentContentProvider('moelsp-status', {
      onDidChange: statusDoc.event,
      provideTextDocumentContent: () => statusText,
    }),
  );
  await start();
}

export async function deactivate() {
  if (refreshTimer) clearTimeout(refreshTimer);
  await client?.stop();
}

function config() {
  return vscode.workspace.getConfiguration('moelsp');
}

async function start() {
  const bin = findBinary(extensionPath);
  if (!bin.path) {
    const msg = `the moelsp executable was not found (looked at: ${bin.tried.join('; ')})`;
    output.info(`${msg}`);
    status.set('error', msg);
    const pick = await vscode.window.showErrorMessage(
      `moelsp: ${msg}. Build it (tools/setup.sh demo in the moelsp sources) and set "moelsp.path", or put moelsp on PATH.`,
      'Open Settings',
      'Show Logs',
    );
    if (pick === 'Open Settings') void vscode.commands.executeCommand('workbench.action.openSettings', 'moelsp.path');
    if (pick === 'Show Logs') output.show(true);
    return;
  }
  const args = ['lsp'];
  const configFile = config().get<string | null>('configFile');
  if (configFile) args.push('--config', configFile);
  output.info(`starting ${bin.path} ${args.join(' ')}`);
  const serverOptions: ServerOptions = { command: bin.path, args };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [{ scheme: 'file' }, { scheme: 'untitled' }],
    initializationOptions: serverSettings(),
    outputChannel: output,
    traceOutputChannel: output,
    revealOutputChannelOn: RevealOutputChannelOn.Never,
    middleware: {
      // Ghost text unless moelsp.enable is false; per-language rules, manual
      // mode and a snooze are the server's (every client gets the same); the
      // status bar shows the request in flight.
      provideInlineCompletionItems: async (document, position, context, token, next) => {
        if (config().get<unknown>('enable', true) === false) return undefined;
        status.begin();
        try {
          return await next(document, position, context, token);
        } finally {
          status.end();
          scheduleStatusRefresh();
          // The definitions of the names near the cursor, for the next
          // completions' context: not for a request the server gates
          // (snoozed, the language off, manual mode as you type).
          const gated =
            status.snoozed ||
            !enabledFor(document.languageId) ||
            (status.manualOnly && context.triggerKind !== vscode.InlineCompletionTriggerKind.Invoke);
          if (!gated && config().get<number | null>('completion.contextTokens') !== 0)
            definitions.schedule(document, position);
        }
      },
      // The suggest widget hides ghost text that does not match its selected
      // item: moelsp stays out of it unless asked.
      provideCompletionItem: (document, position, context, token, next) =>
        config().get<boolean>('suggestWidget', false) ? next(document, position, context, token) : undefined,
    },
  };
  const c = new LanguageClient('moelsp', 'moelsp', serverOptions, clientOptions);
  client = c;
  status.set('starting');
  c.onNotification('moelsp/status', (s: ServerStatus) => onServerStatus(s));
  c.onDidChangeState((e) => {
    if (e.newState === ClientState.Stopped && client === c) status.set('stopped', lastError);
  });
  try {
    await c.start();
    definitions.reset();
    visibleRanges.reset();
    visibleRanges.visible(vscode.window.visibleTextEditors);
  } catch (e: any) {
    lastError = String(e?.message ?? e);
    status.set('error', lastError);
    void vscode.window.showErrorMessage(`moelsp: the server did not start: ${lastError}`, 'Show Logs').then((p) => {
      if (p) output.show(true);
    });
  }
}

function onServerStatus(s: ServerStatus) {
  status.fromServer(s);
  models.onStatus(s);
  if (s.state === 'error' && s.message && s.message !== lastError) {
    lastError = s.message;
    // Most often: the model file is missing or not a model moelsp can run.
    void vscode.window
      .showErrorMessage(`moelsp: ${s.message}`, 'Open Settings', 'Show Logs')
      .then((pick) => {
        if (pick === 'Open Settings') void vscode.commands.executeCommand('workbench.action.openSettings', 'moelsp.model');
        if (pick === 'Show Logs') output.show(true);
      });
  }
}

// Tokens/s and telemetry change with every answer; the server notifies only
// on state changes, so ask for the status once things go quiet.
function scheduleStatusRefresh() {
  if (refreshTimer) return;
  refreshTimer = setTimeout(async () => {
    refreshTimer = undefined;
    if (!client?.isRunning()) return;
    try {
      status.fromServer(await client.sendRequest<ServerStatus>('moelsp/status'));
    } catch {
      /* the next answer tries again */
    }
  }, 1500);
}

async function restart() {
  const old = client;
  client = undefined;
  if (old) {
    try {
      await old.stop(5000);
    } catch {
      /* already gone */
    }
  }
  lastError = '';
  await start();
}

// Everywhere: moelsp.enable's "*" (or the plain boolean).
async function toggleCompletions() {
  const v = config().get<unknown>('enable', true);
  let on: boolean;
  if (v && typeof v === 'object') {
    const o = enableObject();
    on = o['*'] === false;
    o['*'] = on;
    await config().update('enable', o, vscode.ConfigurationTarget.Global);
  } else {
    on = v === false;
    await config().update('enable', on, vscode.ConfigurationTarget.Global);
  }
  vscode.window.setStatusBarMessage(`moelsp: inline completions ${on ? 'enabled' : 'disabled'}`, 3000);
}

// The active editor's language, when it is a document moelsp serves (the
// documentSelector's schemes): the status document (markdown, off by default)
// or a diff's other side says nothing about where moelsp suggests.
function activeLanguage(): string | undefined {
  const doc = vscode.window.activeTextEditor?.document;
  return doc && (doc.uri.scheme === 'file' || doc.uri.scheme === 'untitled') ? doc.languageId : undefined;
}

function renderEnabled() {
  status.setEnabled(enabledFor(activeLanguage()), config().get<unknown>('enable', true) === false);
}

// The active editor's language: its own entry in moelsp.enable.
async function toggleLanguage() {
  const lang = activeLanguage();
  if (!lang) {
    void vscode.window.showInformationMessage('moelsp: open a file first.');
    return;
  }
  const o = enableObject();
  o[lang] = !enabledFor(lang);
  await config().update('enable', o, vscode.ConfigurationTarget.Global);
  vscode.window.setStatusBarMessage(`moelsp: inline completions ${o[lang] ? 'enabled' : 'disabled'} for ${lang}`, 3000);
}

async function toggleManual() {
  const manual = config().get<string | null>('completion.trigger') === 'manual' || status.manualOnly;
  // (explicitly 'automatic': an unset setting is not sent, and the server would stay manual)
  await config().update('completion.trigger', manual ? 'automatic' : 'manual', vscode.ConfigurationTarget.Global);
  vscode.window.setStatusBarMessage(
    manual ? 'moelsp: suggestions as you type' : 'moelsp: suggestions only when asked (Alt+\\)',
    3000,
  );
}

// workspace/executeCommand on the server, which answers its moelsp/status.
async function serverCommand(command: string, args: unknown[] = []) {
  if (!client?.isRunning()) {
    void vscode.window.showInformationMessage('moelsp: the server is not running.');
    return;
  }
  await client.sendRequest('workspace/executeCommand', { command, arguments: args });
  status.fromServer(await client.sendRequest<ServerStatus>('moelsp/status'));
}

async function snooze(minutes?: number) {
  if (typeof minutes !== 'number') {
    const pick = await vscode.window.showQuickPick(
      [5, 15, 30, 60].map((m) => ({ label: `${m} minutes`, minutes: m })),
      { title: 'moelsp: no suggestions as you type for…' },
    );
    if (!pick) return;
    minutes = pick.minutes;
  }
  await serverCommand('moelsp.snooze', [minutes]);
}

async function showStatus() {
  let s: ServerStatus = status.last;
  if (client?.isRunning()) {
    try {
      s = await client.sendRequest<ServerStatus>('moelsp/status');
      status.fromServer(s);
    } catch (e: any) {
      s = { ...s, requestError: String(e?.message ?? e) };
    }
  } else {
    s = { ...s, state: status.current, message: lastError || 'the server is not running' };
  }
  statusText = statusMarkdown(s);
  statusDoc.fire(STATUS_URI);
  const doc = await vscode.workspace.openTextDocument(STATUS_URI);
  await vscode.window.showTextDocument(doc, { preview: true });
}

// The server's own text of its status (every editor shows the same words),
// then every field as JSON for whoever wants the rest. Without a running
// server, its state and why.
function statusMarkdown(s: ServerStatus): string {
  const { summary, summaryLine, ...fields } = s;  // (summaryLine: the status bar's tooltip)
  const live = client?.isRunning() && typeof summary === 'string' && !s.requestError;
  const text = live ? summary : `state:        ${s.state ?? status.current}${s.message ? `  (${s.message})` : ''}\n`;
  const error = s.requestError ? `moelsp/status failed: ${s.requestError}\n\n` : '';
  return `# moelsp status\n\n${error}${text}\n## all fields\n\n\`\`\`json\n${JSON.stringify(fields, null, 2)}\n\`\`\`\n`;
}

// The status opens as a read-only document (nothing to save when it closes).
const STATUS_URI = vscode.Uri.parse('moelsp-status:moelsp%20status.md');
const statusDoc = new vscode.EventEmitter<vscode.Uri>();
let statusText = '';

async function showMenu() {
  const v = config().get<unknown>('enable', true);
  const enabled = v && typeof v === 'object' ? (v as Record<string, unknown>)['*'] !== false : v !== false;
  const lang = activeLanguage();
  const items: Array<vscode.QuickPickItem & { run: () => unknown }> = [
    { label: '$(info) Show status and plan', run: showStatus },
    {
      label: enabled ? '$(circle-slash) Disable inline completions' : '$(check) Enable inline completions',
      run: toggleCompletions,
    },
  ];
  if (lang)
    items.push({
      label: enabledFor(lang) ? `$(circle-slash) Disable for ${lang}` : `$(check) Enable for ${lang}`,
      run: toggleLanguage,
    });
  items.push(
    status.snoozed
      ? { label: '$(play) Resume suggestions', run: () => serverCommand('moelsp.resume') }
      : { label: '$(clock) Snooze suggestions…', run: () => snooze() },
    {
      label: status.manualOnly ? '$(play) Suggest as I type' : '$(debug-pause) Suggest only when asked (Alt+\\)',
      run: toggleManual,
    },
    { label: '$(comment-discussion) Open chat', run: () => vscode.commands.executeCommand('moelsp.openChat') },
    { label: '$(database) Choose model…', run: () => models.choose() },
    { label: '$(debug-restart) Restart server', run: restart },
    { label: '$(output) Show logs', run: () => output.show(true) },
    { label: '$(gear) Settings', run: () => vscode.commands.executeCommand('workbench.action.openSettings', 'moelsp') },
  );
  const pick = await vscode.window.showQuickPick(items, {
    // The server's line while it runs; else what the status bar knows.
    title: status.serverLine ?? `moelsp: ${status.current}`,
    placeHolder: lastError || 'moelsp',
  });
  await pick?.run();
}

async function askAboutSelection(kind: CodeKind) {
  const ctx = editorContext();
  if (!ctx) {
    void vscode.window.showInformationMessage('moelsp: open a file and select some code first.');
    return;
  }
  await chat.askFromEditor(kind, ctx);
}

async function onConfigurationChanged(e: vscode.ConfigurationChangeEvent) {
  if (!e.affectsConfiguration('moelsp')) return;
  renderEnabled();
  if (e.affectsConfiguration('moelsp.path') || e.affectsConfiguration('moelsp.configFile')) {
    const pick = await vscode.window.showInformationMessage('moelsp: restart the server to use the new executable or config file?', 'Restart');
    if (pick) await restart();
    return;
  }
  const enableChanged = e.affectsConfiguration('moelsp.enable');
  const changed = SERVER_KEYS.filter((k) => e.affectsConfiguration(`moelsp.${k}`));
  if ((changed.length === 0 && !enableChanged) || !client?.isRunning()) return;
  // The server applies every setting itself: the model, backend and plan
  // settings reload its engine in place (status: loading, then ready).
  // A model setting cleared goes as "" (the default); unset keys are not
  // sent at all, and the server would keep the old one.
  const settings = serverSettings(enableChanged) as Record<string, any>;
  if (e.affectsConfiguration('moelsp.model') && !config().get('model')) settings.model = '';
  if (e.affectsConfiguration('moelsp.completion.model') && !config().get('completion.model'))
    settings.completion = { ...(settings.completion ?? {}), model: '' };
  await client.sendNotification('workspace/didChangeConfiguration', { settings: { moelsp: settings } });
}

// "moelsp: Choose Model…": a quick pick of the models in the cache, the
// downloads the server's model guide says fit this machine (moelsp/models),
// a GGUF file on disk, or a hub reference typed in. The pick is the
// `moelsp.model` setting (user scope): the server reloads in place, or pulls
// a reference in the background while the embedded model keeps answering,
// and a notification shows the pull's progress from its moelsp/status.
import * as vscode from 'vscode';
import type { LanguageClient } from 'vscode-languageclient/node';

import type { ServerStatus } from './status';

interface Cached {
  label: string;
  path: string;
  bytes: number;
  partial: boolean;
  ref: string;
}
interface Suggested {
  ref: string;
  use: string;
  bytes: number;
  fits: boolean;
  where: string;
  context: number;
  plannedBytes: number;
  decodeTokensPerSecond: number;
  error: string;
  cached: boolean;
}
interface Models {
  model: { setting: string | null; file: string; state: string };
  embedded: string;
  cacheDir: string;
  cached: Cached[];
  suggested?: Suggested[];
  suggestError?: string;
}
type Item = vscode.QuickPickItem & { run?: () => Promise<void> };

// As the server reads a `model` value: hf://…, or owner/repo:QUANT.
function isRef(m: string): boolean {
  return m.startsWith('hf://') || /^[^/\s:]+\/[^/\s:]+:\S+$/.test(m);
}

export function size(bytes: number): string {
  return bytes >= 2 ** 30 ? `${(bytes / 2 ** 30).toFixed(1)} GiB` : `${Math.round(bytes / 2 ** 20)} MiB`;
}

export class ModelPicker {
  private listeners = new Set<(s: ServerStatus) => void>();

  constructor(private readonly client: () => LanguageClient | undefined) {}

  // Every moelsp/status the extension receives (the pull's progress).
  onStatus(s: ServerStatus) {
    for (const l of [...this.listeners]) l(s);
  }

  async choose() {
    const c = this.client();
    if (!c?.isRunning()) {
      void vscode.window.showInformationMessage('moelsp: the server is not running.');
      return;
    }
    const qp = vscode.window.createQuickPick<Item>();
    qp.title = 'moelsp: Choose Model';
    qp.placeholder = 'A model in the cache, a download that fits this machine, or a GGUF file';
    qp.matchOnDescription = true;
    qp.matchOnDetail = true;
    qp.busy = true;
    qp.show();
    const accepted = new Promise<Item | undefined>((resolve) => {
      qp.onDidAccept(() => resolve(qp.selectedItems[0]));
      qp.onDidHide(() => resolve(undefined));
    });
    // The cache answers at once; the guide reads the hub (seconds, once).
    c.sendRequest<Models>('moelsp/models', { suggest: false }).then(
      (m) => {
        if (qp.busy) qp.items = this.items(m);
      },
      () => {},
    );
    c.sendRequest<Models>('moelsp/models', { suggest: true }).then(
      (m) => {
        qp.items = this.items(m);
        qp.busy = false;
      },
      (e) => {
        qp.busy = false;
        qp.placeholder = `moelsp/models failed: ${e?.message ?? e}`;
      },
    );
    const pick = await accepted;
    qp.hide();
    qp.dispose();
    await pick?.run?.();
  }

  private items(m: Models): Item[] {
    const current = m.model.setting ?? '';
    const mark = (v: string) => (v === current || v === m.model.file ? '$(check) ' : '');
    const items: Item[] = [
      {
        label: `${mark(m.embedded)}Embedded default model`,
        description: 'small, built in: completions while nothing else is set',
        run: () => this.use(undefined),
      },
      { label: `in the cache (${m.cacheDir})`, kind: vscode.QuickPickItemKind.Separator },
    ];
    for (const f of m.cached)
      items.push({
        label: `${f.partial ? '' : mark(f.path)}${f.label.split('/').pop()}`,
        description: f.partial ? `${size(f.bytes)} so far: resume the download` : size(f.bytes),
        detail: f.label,
        run: () => this.use(f.partial ? f.ref : f.path),
      });
    if (m.cached.length === 0) items.push({ label: 'nothing yet', description: 'pull one below' });
    items.push({ label: 'download from Hugging Face (the plan for this machine)', kind: vscode.QuickPickItemKind.Separator });
    if (m.suggestError) items.push({ label: '$(warning) the model guide cannot reach the hub', detail: m.suggestError });
    else if (!m.suggested) items.push({ label: '$(loading~spin) reading the models\' headers from the hub…' });
    for (const r of m.suggested ?? []) items.push(this.suggestion(r, mark));
    items.push(
      { label: 'other', kind: vscode.QuickPickItemKind.Separator },
      { label: '$(folder-opened) A GGUF file…', run: () => this.file() },
      { label: '$(cloud-download) A Hugging Face reference…', description: 'owner/repo:QUANT', run: () => this.typed() },
    );
    return items;
  }

  private suggestion(r: Suggested, mark: (v: string) => string): Item {
    if (!r.bytes) return { label: `$(warning) ${r.ref}`, detail: `not available: ${r.error}`, run: () => this.use(r.ref) };
    const speed = r.decodeTokensPerSecond > 0 ? `, ~${Math.round(r.decodeTokensPerSecond)} tokens/s` : '';
    const plan = r.fits
      ? `fits: ${r.where}, context ${r.context}, ${size(r.plannedBytes)}${speed}`
      : `does not fit: ${r.error}`;
    return {
      label: `${mark(r.ref)}${r.fits ? '' : '$(warning) '}${r.ref}`,
      description: r.bytes ? `${size(r.bytes)}${r.cached ? ' · in the cache' : ''}` : '',
      detail: `${plan} · ${r.use}`,
      run: async () => {
        if (!r.fits) {
          const go = await vscode.window.showWarningMessage(
            `moelsp: ${r.ref} does not fit this machine: ${r.error}`,
            { modal: true },
            'Use it anyway',
          );
          if (!go) return;
        }
        await this.use(r.ref);
      },
    };
  }

  private async file() {
    const uris = await vscode.window.showOpenDialog({
      canSelectMany: false,
      filters: { 'GGUF models': ['gguf'] },
      title: 'moelsp: a GGUF model',
    });
    if (uris?.[0]) await this.use(uris[0].fsPath);
  }

  private async typed() {
    const ref = await vscode.window.showInputBox({
      title: 'moelsp: a model on Hugging Face',
      prompt: 'owner/repo:QUANT, hf://owner/repo/file.gguf (pulled into the cache, then loaded)',
      placeHolder: 'unsloth/Qwen3-Coder-30B-A3B-Instruct-GGUF:Q4_K_M',
      validateInput: (v) => (/^(hf:\/\/)?[^\s/:]+\/[^\s/:]+([:/]\S+)?$/.test(v.trim()) ? undefined : 'owner/repo:QUANT'),
    });
    if (ref) await this.use(ref.trim());
  }

  // The setting (user scope) is what the server reads; undefined: the default.
  private async use(model: string | undefined) {
    const cfg = vscode.workspace.getConfiguration('moelsp');
    const before = cfg.get<string | null>('model') ?? undefined;
    if (model === before) return;
    await cfg.update('model', model, vscode.ConfigurationTarget.Global);
    vscode.window.setStatusBarMessage(`moelsp: model ${model ?? 'the embedded default'}`, 4000);
    if (model && isRef(model)) void this.followPull(model, before);
  }

  // A notification with the pull's progress while the server fetches a
  // reference; Cancel puts the previous model back (the server stops the pull).
  private followPull(ref: string, before: string | undefined) {
    return vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: `moelsp: ${ref}`, cancellable: true },
      (progress, token) =>
        new Promise<void>((resolve) => {
          let shown = 0;
          let seen = false;
          const done = (msg?: string, error = false) => {
            this.listeners.delete(listener);
            clearTimeout(quiet);
            resolve();
            if (msg) void (error ? vscode.window.showErrorMessage(msg) : vscode.window.showInformationMessage(msg));
          };
          const listener = (s: ServerStatus) => {
            const p = s.pull as { ref: string; state: string; done: number; total: number; file: string; message: string };
            if (p?.ref !== ref) return;
            seen = true;
            if (p.state === 'pulling') {
              const pct = p.total ? Math.floor((100 * p.done) / p.total) : 0;
              progress.report({
                message: p.file ? `${p.file}: ${size(p.done)} of ${size(p.total)}` : 'listing the repository',
                increment: pct - shown,
              });
              shown = pct;
            } else if (p.state === 'failed') {
              done(); // the server says why (window/showMessage)
            } else if (p.state === 'done' && s.state === 'ready' && p.message && s.message?.includes(p.message)) {
              done(`moelsp: ${ref} loaded`);
            }
          };
          // A reference already in the cache loads without a pull.
          const quiet = setTimeout(() => !seen && done(), 15000);
          this.listeners.add(listener);
          token.onCancellationRequested(() => {
            done();
            void vscode.workspace.getConfiguration('moelsp').update('model', before, vscode.ConfigurationTarget.Global);
          });
        }),
    );
  }
}

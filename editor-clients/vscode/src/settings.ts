// The extension's settings → the server's settings (initializationOptions at
// start, workspace/didChangeConfiguration after). Only what the user set is
// sent: an unset setting leaves the choice to the server's automatic plan
// (and to ~/.config/moelsp/config.toml), which a default here would override.
import * as fs from 'fs';
import * as path from 'path';
import * as vscode from 'vscode';

// Settings the server reads (`moelsp settings`; tests/test_settings.cpp checks
// this list against the server's table); the extension's own
// (path, suggestWidget, configFile, trace) stay out; `enable` is both: its
// object form is the server's completion.languages.
export const SERVER_KEYS = [
  'model',
  'completion.model',
  'threads',
  'contextSize',
  'kvCache.type',
  'kvCache.tokens',
  'kvCache.blockSize',
  'kvCache.paged',
  'completion.maxTokens',
  'completion.timeBudgetMs',
  'completion.debounceMs',
  'completion.draftTokens',
  'completion.fimOrder',
  'completion.contextTokens',
  'completion.languages', // from moelsp.enable (Copilot's object form), below
  'completion.trigger',
  'workspace.index',
  'workspace.maxFiles',
  'exclude',
  'chat.maxTokens',
  'chat.template',
  'weights',
  'experts.prefetch',
  'experts.prefetchDistance',
  'experts.cacheMb',
  'batch.max',
  'gpu.device',
  'gpu.expertsPerLayer',
  'promptCache.dir',
  'promptCache.maxMiB',
  'promptCache.minTokens',
  'backend.url',
  'backend.apiKey',
  'backend.model',
  'backend.api',
  'backend.fimTemplate',
  'backend.caFile',
  'backend.verifyTls',
] as const;

// Nested objects, e.g. {"completion": {"maxTokens": 32}}, with `~` expanded in the model path.
// `enableChanged`: moelsp.enable changed, so its rules go even when it is
// back at its default (the server would keep the ones it had).
export function serverSettings(enableChanged = false): Record<string, unknown> {
  const cfg = vscode.workspace.getConfiguration('moelsp');
  const out: Record<string, any> = {};
  for (const key of SERVER_KEYS) {
    let v = key === 'completion.languages' ? languageRules(enableChanged) : cfg.get<unknown>(key);
    if (v === null || v === undefined || v === '') continue;
    if ((key === 'model' || key === 'completion.model') && typeof v === 'string') v = expandHome(v);
    const parts = key.split('.');
    let o = out;
    for (const p of parts.slice(0, -1)) o = o[p] ??= {};
    o[parts[parts.length - 1]] = v;
  }
  return out;
}

// moelsp.enable as the rules it stands for: its object form as VS Code
// merges it over the defaults ({"python": false} keeps markdown off), a
// plain `true` as the default object. (`false` turns moelsp off in this
// extension; the rules do not matter then.)
function effectiveEnable(): Record<string, unknown> {
  const cfg = vscode.workspace.getConfiguration('moelsp');
  const v = cfg.get<unknown>('enable', true);
  if (v && typeof v === 'object') return v as Record<string, unknown>;
  return (cfg.inspect<unknown>('enable')?.defaultValue ?? {}) as Record<string, unknown>;
}

// The rules for the server's completion.languages ("*,!markdown");
// undefined while the user has not set moelsp.enable (the server's defaults
// say the same for VS Code's ids), unless `force` (it changed: the server
// would keep the rules it had).
export function languageRules(force = false): string | undefined {
  const i = vscode.workspace.getConfiguration('moelsp').inspect<unknown>('enable');
  const set = i?.workspaceFolderValue ?? i?.workspaceValue ?? i?.globalValue;
  if (set === undefined && !force) return undefined;
  return Object.entries(effectiveEnable())
    .filter(([lang, on]) => /^[^,!\s]+$/.test(lang) && typeof on === 'boolean')
    .map(([lang, on]) => (on ? lang : `!${lang}`))
    .join(',');
}

// Is moelsp.enable on for this language (automatic suggestions)? The same
// rule as the server's: the language's own entry, else "*", else on.
export function enabledFor(languageId: string | undefined): boolean {
  if (vscode.workspace.getConfiguration('moelsp').get<unknown>('enable', true) === false) return false;
  const o = effectiveEnable();
  const own = languageId !== undefined ? o[languageId] : undefined;
  if (typeof own === 'boolean') return own;
  return typeof o['*'] === 'boolean' ? (o['*'] as boolean) : true;
}

// moelsp.enable as an object (a boolean true becomes the defaults' object).
export function enableObject(): Record<string, boolean> {
  const cfg = vscode.workspace.getConfiguration('moelsp');
  const v = cfg.get<unknown>('enable', true);
  if (v && typeof v === 'object') return { ...(v as Record<string, boolean>) };
  const defaults = (cfg.inspect<unknown>('enable')?.defaultValue ?? {}) as Record<string, boolean>;
  return { ...defaults, '*': v !== false };
}

export function expandHome(p: string): string {
  return p.startsWith('~/') ? path.join(process.env.HOME ?? '', p.slice(2)) : p;
}

// The moelsp executable: the setting, else PATH, else the build tree next to
// this extension's sources (editor-clients/vscode → build/cli/moelsp).
// Undefined, with the places tried, when there is none.
export function findBinary(extensionPath: string): { path?: string; tried: string[] } {
  const tried: string[] = [];
  const setting = vscode.workspace.getConfiguration('moelsp').get<string | null>('path');
  if (setting) {
    const p = expandHome(setting);
    tried.push(`moelsp.path = ${p}`);
    return isExecutable(p) ? { path: p, tried } : { tried };
  }
  for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
    if (!dir) continue;
    const p = path.join(dir, 'moelsp');
    if (isExecutable(p)) return { path: p, tried };
  }
  tried.push('moelsp on PATH');
  const build = path.resolve(extensionPath, '..', '..', 'build', 'server', 'moelsp');
  tried.push(build);
  return isExecutable(build) ? { path: build, tried } : { tried };
}

function isExecutable(p: string): boolean {
  try {
    fs.accessSync(p, fs.constants.X_OK);
    return fs.statSync(p).isFile();
  } catch {
    return false;
  }
}

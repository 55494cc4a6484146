// The extension's settings → the server's settings (initializationOptions at
// start, workspace/didChangeConfiguration after). Only what the user set is
// sent: an unset setting leaves the choice to the server's automatic plan
// (and to ~/.config/moelsp/config.toml), which a default here would override.
import * as fs from 'fs';
import * as path from 'path';
import * as vscode from 'vscode';

// Settings the server reads (`moelsp settings`; tests/test_settings.cpp checks
// this list against the server's table); the extension's own
// (path, enable, suggestWidget, configFile, trace) stay out.
export const SERVER_KEYS = [
  'model',
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
export function serverSettings(): Record<string, unknown> {
  const cfg = vscode.workspace.getConfiguration('moelsp');
  const out: Record<string, any> = {};
  for (const key of SERVER_KEYS) {
    let v = cfg.get<unknown>(key);
    if (v === null || v === undefined || v === '') continue;
    if (key === 'model' && typeof v === 'string') v = expandHome(v);
    const parts = key.split('.');
    let o = out;
    for (const p of parts.slice(0, -1)) o = o[p] ??= {};
    o[parts[parts.length - 1]] = v;
  }
  return out;
}

export function expandHome(p: string): string {
  return p.startsWith('~/') ? path.join(process.env.HOME ?? '', p.slice(2)) : p;
}

// The moelsp executable: the setting, else PATH, else the build tree next to
// this extension's sources (editor-clients/vscode → build/server/moelsp).
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

// Context from the editor for the server's completions (issue 45; our
// protocol extension, see lsp/handlers_editor_context.cpp): definitions from
// the editor's own language extensions (moelsp/didResolveDefinitions) and the
// lines visible editors show (moelsp/didChangeVisibleRanges).
//
// Definitions: After a completion request, once typing
// pauses, the names on the cursor's line and the three above it are looked up
// with VS Code's definition providers (Pylance, the TypeScript service,
// clangd…) and the locations go to the server, which reads the definitions'
// first lines into the next completions' prompts. Only when the set of names
// changes, at most 12 names, each lookup bounded in time.
import * as vscode from 'vscode';
import type { LanguageClient } from 'vscode-languageclient/node';

const KEYWORDS = new Set(
  ('and as assert async await break case catch class const continue def del elif else except export extends false ' +
    'finally for from function if import in interface is lambda let new none not null or pass raise return self ' +
    'static struct super switch this throw true try type typeof var void while with yield None True False').split(' '),
);
const MAX_NAMES = 12;
const LOOKUP_MS = 1500;
const PAUSE_MS = 300;

interface Near {
  name: string;
  position: vscode.Position;
}

// Whole names before the cursor (not the word being typed), nearest first.
export function namesNear(doc: vscode.TextDocument, pos: vscode.Position): Near[] {
  const out: Near[] = [];
  const seen = new Set<string>();
  for (let line = pos.line; line >= Math.max(0, pos.line - 3) && out.length < MAX_NAMES; line--) {
    let text = doc.lineAt(line).text;
    if (line === pos.line) text = text.slice(0, pos.character).replace(/[A-Za-z0-9_]+$/, '');
    const found: Near[] = [];
    for (const m of text.matchAll(/[A-Za-z_][A-Za-z0-9_]*/g)) {
      const name = m[0];
      if (name.length < 3 || KEYWORDS.has(name) || seen.has(name)) continue;
      seen.add(name);
      found.push({ name, position: new vscode.Position(line, (m.index ?? 0) + 1) });
    }
    out.push(...found.reverse().slice(0, MAX_NAMES - out.length));
  }
  return out;
}

function withTimeout<T>(p: Thenable<T>, ms: number): Promise<T | undefined> {
  return Promise.race([Promise.resolve(p), new Promise<undefined>((r) => setTimeout(() => r(undefined), ms))]);
}

export class DefinitionFeed {
  private readonly sent = new Map<string, string>(); // document → the names last sent for it
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly client: () => LanguageClient | undefined) {}

  // After a completion request at `pos`: resolve once typing pauses.
  schedule(doc: vscode.TextDocument, pos: vscode.Position) {
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => void this.resolve(doc, pos).catch(() => undefined), PAUSE_MS);
  }

  forget(doc: vscode.TextDocument) {
    this.sent.delete(doc.uri.toString());
  }

  // A new server knows nothing.
  reset() {
    this.sent.clear();
  }

  private async resolve(doc: vscode.TextDocument, pos: vscode.Position) {
    const c = this.client();
    if (!c?.isRunning() || doc.isClosed) return;
    const names = namesNear(doc, pos);
    const key = names.map((n) => n.name).join(',');
    const uri = doc.uri.toString();
    if (this.sent.get(uri) === key) return;
    const found = await Promise.all(
      names.map(async (n) => {
        const locs = await withTimeout(
          vscode.commands.executeCommand<Array<vscode.Location | vscode.LocationLink>>(
            'vscode.executeDefinitionProvider',
            doc.uri,
            n.position,
          ),
          LOOKUP_MS,
        ).catch(() => undefined);
        const l = locs?.[0];
        if (!l) return undefined;
        const target = 'targetUri' in l ? l.targetUri : l.uri;
        const range = 'targetUri' in l ? (l.targetSelectionRange ?? l.targetRange) : l.range;
        if (target.toString() === uri && range.contains(n.position)) return undefined; // the name's own definition
        return {
          name: n.name,
          location: {
            uri: target.toString(),
            range: {
              start: { line: range.start.line, character: range.start.character },
              end: { line: range.end.line, character: range.end.character },
            },
          },
        };
      }),
    );
    const definitions = found.filter((d) => d !== undefined);
    // Nothing found is not remembered: a language service that is still
    // starting answers empty (or late), and the next pause asks again (and
    // the server's set is empty now, whatever was sent before).
    if (definitions.length > 0) this.sent.set(uri, key);
    else this.sent.delete(uri);
    if (!c.isRunning()) return;
    await c.sendNotification('moelsp/didResolveDefinitions', { textDocument: { uri }, definitions });
  }
}

// The lines each visible editor shows (moelsp/didChangeVisibleRanges): the
// server adds what another editor shows (a split with the file being called
// into) to the completions' context. Sent once scrolling settles; an editor
// no longer visible is sent with no ranges.
export class VisibleRangesFeed {
  private readonly timers = new Map<string, NodeJS.Timeout>();
  private readonly sent = new Map<string, string>(); // document → the lines last sent

  constructor(private readonly client: () => LanguageClient | undefined) {}

  update(editor: vscode.TextEditor) {
    const doc = editor.document;
    if (doc.uri.scheme !== 'file' && doc.uri.scheme !== 'untitled') return;
    const uri = doc.uri.toString();
    const t = this.timers.get(uri);
    if (t) clearTimeout(t);
    this.timers.set(
      uri,
      setTimeout(() => {
        this.timers.delete(uri);
        const r = editor.visibleRanges[0];
        void this.send(uri, r ? [r.start.line, r.end.line] : undefined);
      }, PAUSE_MS),
    );
  }

  // The visible editors changed: the new ones are sent, the gone ones cleared.
  visible(editors: readonly vscode.TextEditor[]) {
    const now = new Set(editors.map((e) => e.document.uri.toString()));
    for (const uri of [...this.sent.keys()]) if (!now.has(uri)) void this.send(uri, undefined);
    editors.forEach((e) => this.update(e));
  }

  // A new server knows nothing: everything visible is sent again.
  reset() {
    this.sent.clear();
  }

  private async send(uri: string, lines: [number, number] | undefined) {
    const key = lines ? lines.join('-') : '';
    if ((this.sent.get(uri) ?? '') === key) return;
    const c = this.client();
    if (!c?.isRunning()) return;
    if (lines) this.sent.set(uri, key);
    else this.sent.delete(uri);
    const ranges = lines ? [{ start: { line: lines[0], character: 0 }, end: { line: lines[1], character: 0 } }] : [];
    await c.sendNotification('moelsp/didChangeVisibleRanges', { textDocument: { uri }, ranges });
  }
}

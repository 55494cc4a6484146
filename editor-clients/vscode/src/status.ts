// The status bar item: is moelsp running, and if not, why. States come from
// the server's moelsp/status notifications (loading / ready / error) and from
// this extension's own requests in flight (busy); tokens/s from the last
// status the server answered. The tooltip is the server's own line
// (summaryLine), the words every editor shows.
import * as vscode from 'vscode';

export type State = 'starting' | 'loading' | 'ready' | 'busy' | 'error' | 'stopped' | 'disabled';

export interface ServerStatus {
  state?: string;
  message?: string;
  model?: string;
  tokensPerSecond?: number;
  plan?: Record<string, any>;
  hardware?: Record<string, any>;
  completions?: Record<string, any>;
  // The status rendered by the server: the whole of it as lines of text
  // (markdown), and in one line.
  summary?: string;
  summaryLine?: string;
  [k: string]: unknown;
}

export class StatusBar implements vscode.Disposable {
  private readonly item = vscode.window.createStatusBarItem('moelsp.status', vscode.StatusBarAlignment.Right, 100);
  private state: State = 'starting';
  private message = '';
  private inFlight = 0;
  private enabled = true;
  private allOff = false;
  private manual = false;
  private snoozeUntil = 0; // Date.now() ms; 0: not snoozed
  private snoozeTimer: NodeJS.Timeout | undefined;
  last: ServerStatus = {};

  // refresh: asks the server for its status again (it comes back through
  // fromServer).
  constructor(private readonly refresh: () => void = () => {}) {
    this.item.name = 'moelsp';
    this.item.command = 'moelsp.showMenu';
    this.render();
    this.item.show();
  }

  get current(): State {
    return this.state;
  }

  // off: moelsp.enable is false (nothing at all, Alt+\ neither), else the
  // file's language is off (Alt+\ still asks).
  setEnabled(on: boolean, off = false) {
    this.enabled = on;
    this.allOff = off;
    this.render();
  }

  // The server's own controls, from moelsp/status: manual mode and a snooze.
  private controlsFrom(s: ServerStatus) {
    const c = s.completions;
    if (!c) return;
    this.manual = c.trigger === 'manual';
    const left = Number(c.snoozeLeftMs ?? 0);
    this.snoozeUntil = left > 0 ? Date.now() + left : 0;
    if (this.snoozeTimer) clearInterval(this.snoozeTimer);
    this.snoozeTimer = undefined;
    // The minutes left count down; the server says when it ends, not as it
    // does: its line (the tooltip) is asked for again at each tick.
    if (this.snoozeUntil)
      this.snoozeTimer = setInterval(() => {
        this.render();
        this.refresh();
      }, 15000);
  }

  get snoozed(): boolean {
    return this.snoozeUntil > Date.now();
  }
  get manualOnly(): boolean {
    return this.manual;
  }

  // The server's line for the state shown, when the server said it (not
  // while the server is not running, or before its first status).
  get serverLine(): string | undefined {
    const live = this.state === 'loading' || this.state === 'ready' || this.state === 'busy';
    return live && typeof this.last.summaryLine === 'string' ? this.last.summaryLine : undefined;
  }

  set(state: State, message = '') {
    this.state = state;
    this.message = message;
    this.render();
  }

  fromServer(s: ServerStatus) {
    this.last = { ...this.last, ...s };
    this.controlsFrom(s);
    const st = s.state ?? 'loading';
    if (st === 'error') this.set('error', s.message ?? 'unknown error');
    else if (st === 'loading') this.set('loading', s.message ?? '');
    else this.set(st === 'busy' ? 'busy' : 'ready', s.message ?? '');
  }

  // Requests this extension sent and has not had answered yet.
  begin() {
    this.inFlight++;
    this.render();
  }
  end() {
    this.inFlight = Math.max(0, this.inFlight - 1);
    this.render();
  }

  private render() {
    const model = this.last.model ?? 'model';
    const tps = this.last.tokensPerSecond ? ` · ${this.last.tokensPerSecond.toFixed(1)} tok/s` : '';
    const line = this.serverLine;
    let text: string, tip: string;
    this.item.backgroundColor = undefined;
    switch (this.state) {
      case 'starting':
        text = '$(loading~spin) moelsp';
        tip = 'moelsp: starting the server';
        break;
      case 'loading':
        text = '$(loading~spin) moelsp: loading';
        tip = line ?? `moelsp: ${this.message || 'loading the model'}`;
        break;
      case 'ready':
      case 'busy':
        if (this.inFlight > 0 || this.state === 'busy') {
          text = `$(sync~spin) moelsp: ${model}`;
          tip = line ? `moelsp: working\n${line}` : `moelsp: working (${model})`;
        } else {
          text = `$(check) moelsp: ${model}${tps}`;
          tip = line ?? `moelsp: ready — ${model}${tps}`;
        }
        break;
      case 'error':
        text = '$(error) moelsp';
        tip = `moelsp error: ${this.message}`;
        this.item.backgroundColor = new vscode.ThemeColor('statusBarItem.errorBackground');
        break;
      case 'stopped':
        text = '$(debug-stop) moelsp: stopped';
        tip = `moelsp: the server is not running${this.message ? ` — ${this.message}` : ''}`;
        this.item.backgroundColor = new vscode.ThemeColor('statusBarItem.warningBackground');
        break;
      default:
        text = 'moelsp';
        tip = 'moelsp';
    }
    const live = this.state !== 'error' && this.state !== 'stopped';
    if (live && this.snoozeUntil && !this.snoozed) {
      this.snoozeUntil = 0;
      if (this.snoozeTimer) clearInterval(this.snoozeTimer);
      this.snoozeTimer = undefined;
    }
    if (live && !this.enabled) {
      text = '$(circle-slash) ' + text.replace(/^\$\([^)]*\) /, '');
      tip += this.allOff ? ' (inline completions disabled)' : ' (inline completions off for this language; Alt+\\ still asks)';
    } else if (live && this.snoozed) {
      const min = Math.ceil((this.snoozeUntil - Date.now()) / 60000);
      text = `$(clock) moelsp: snoozed ${min} min`;
      // (the server's line says how long, when there is one)
      tip += line ? ' (Alt+\\ still asks)' : ` (snoozed for ${min} more min; Alt+\\ still asks)`;
    } else if (live && this.manual) {
      text = '$(debug-pause) ' + text.replace(/^\$\([^)]*\) /, '');
      tip += line ? ' (Alt+\\ asks)' : ' (suggestions only when asked: Alt+\\)';
    }
    this.item.text = text;
    this.item.tooltip = `${tip}\nClick for the moelsp menu`;
  }

  dispose() {
    if (this.snoozeTimer) clearInterval(this.snoozeTimer);
    this.item.dispose();
  }
}

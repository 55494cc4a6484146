vim9script
# moelsp for Vim 9: the LSP client (job + channel in 'lsp' mode), document
# sync, status and log, and every moelsp#... function plugin/moelsp.vim and
# users call.  The inline suggestions (ghost text and its keys) are in
# autoload/moelsp/ghost.vim, :MoeChat in autoload/moelsp/chat.vim; those two use
# the helpers exported here "for the other moelsp scripts".
#
# Settings (read when used, so they can change at any time):
#   g:moelsp_command       'moelsp' (a string: the executable, started with
#                          `lsp`) or a list: the whole command line
#   g:moelsp_filetypes     filetypes to attach to; ['*'] for all
#   g:moelsp_init_options  dict sent as initializationOptions
#   g:moelsp_enabled       automatic suggestions on (true) or off
#   g:moelsp_debounce_ms   idle time in insert mode before asking (75)

import autoload 'moelsp/ghost.vim'
import autoload 'moelsp/chat.vim'

const default_filetypes = ['python', 'c', 'cpp', 'cuda', 'objc', 'objcpp', 'rust', 'go', 'java', 'kotlin',
  'scala', 'cs', 'javascript', 'javascriptreact', 'typescript', 'typescriptreact', 'lua', 'sh', 'bash', 'zsh',
  'ruby', 'perl', 'php', 'swift', 'dart', 'haskell', 'ocaml', 'elixir', 'erlang', 'julia', 'r', 'zig', 'nim',
  'vim', 'sql', 'html', 'css', 'scss', 'json', 'yaml', 'toml', 'make', 'cmake', 'dockerfile', 'markdown', 'tex']
# Vim filetype -> LSP languageId where they differ.
const language_ids = {sh: 'shellscript', bash: 'shellscript', zsh: 'shellscript', cs: 'csharp', make: 'makefile',
  objc: 'objective-c', objcpp: 'objective-cpp', tex: 'latex', cuda: 'cuda-cpp'}

var job: job = null_job
var chan: channel = null_channel
var initialized = false
var stopping = false
var status: dict<any> = {state: 'stopped', message: ''}
var root = ''      # the rootUri's directory: the cwd when the server started
var error_shown = false
var log_lines: list<string> = []
var docs: dict<dict<any>> = {}   # bufnr -> {uri, languageId, version, tick, opened}

# ---- small helpers ---------------------------------------------------------------

# For the other moelsp scripts too.
export def Log(line: string)
  for l in split(line, "\n")
    log_lines->add(strftime('%H:%M:%S ') .. l)
  endfor
  if len(log_lines) > 2000
    log_lines = log_lines[-1500 :]
  endif
enddef

def Warn(msg: string)
  Log(msg)
  echohl WarningMsg
  echomsg msg
  echohl None
enddef

# LSP positions count UTF-16 code units.
export def Utf16Len(s: string): number
  var n = 0
  for c in str2list(s)
    n += c > 0xFFFF ? 2 : 1
  endfor
  return n
enddef

def Uri(buf: number): string
  const name = bufname(buf)
  if name == ''
    return 'untitled:Untitled-' .. buf
  endif
  if name =~ '^\a[[:alnum:]+.-]*://'
    return name
  endif
  return FileUri(fnamemodify(name, ':p'))
enddef

# file:// URI of an absolute path: every byte but unreserved ones and '/' percent-encoded.
def FileUri(path: string): string
  var out = 'file://'
  for i in range(len(path))
    const c = strpart(path, i, 1)
    out ..= c =~ '^[A-Za-z0-9/._~-]$' ? c : printf('%%%02X', char2nr(c))
  endfor
  return out
enddef

def DocText(buf: number): string
  var text = join(getbufline(buf, 1, '$'), "\n")
  if getbufvar(buf, '&eol') || getbufvar(buf, '&fixeol')
    text ..= "\n"
  endif
  return text
enddef

def Running(): bool
  return chan != null_channel && ch_status(chan) == 'open'
enddef

export def Notify(method: string, params: any)
  if Running()
    ch_sendexpr(chan, {method: method, params: params})
  endif
enddef

# An asynchronous request; returns its id (0 when not sent).
export def Send(method: string, params: any, Callback: func): number
  if !Running()
    return 0
  endif
  const r = ch_sendexpr(chan, {method: method, params: params}, {callback: (_, msg) => Callback(msg)})
  return type(r) == v:t_dict ? get(r, 'id', 0) : 0
enddef

export def CancelRequest(id: number)
  if id > 0
    Notify('$/cancelRequest', {id: id})
  endif
enddef

# ---- the server ------------------------------------------------------------------

def Command(): list<string>
  const c = get(g:, 'moelsp_command', 'moelsp')
  if type(c) == v:t_list
    return copy(c)
  endif
  return [c, 'lsp']
enddef

export def Start(): bool
  if Running()
    return true
  endif
  const cmd = Command()
  if !executable(cmd[0])
    if !error_shown
      Warn('moelsp: cannot run ' .. string(cmd[0]) .. ': set g:moelsp_command to the moelsp executable')
      error_shown = true
    endif
    status = {state: 'error', message: 'executable not found: ' .. cmd[0]}
    return false
  endif
  Log('starting ' .. join(cmd))
  stopping = false
  initialized = false
  for d in values(docs)
    d.opened = false
  endfor
  job = job_start(cmd, {
    in_mode: 'lsp', out_mode: 'lsp', err_mode: 'nl', noblock: true,
    out_cb: (_, msg) => OnMessage(msg),
    err_cb: (_, text) => Log('stderr: ' .. text),
    exit_cb: (_, code) => OnExit(code),
  })
  if job_status(job) != 'run'
    Warn('moelsp: could not start ' .. join(cmd))
    status = {state: 'error', message: 'could not start ' .. join(cmd)}
    job = null_job
    return false
  endif
  chan = job_getchannel(job)
  status = {state: 'starting', message: ''}
  root = getcwd()
  const opts = get(g:, 'moelsp_init_options', {})
  const params = {
    processId: getpid(),
    clientInfo: {name: 'vim', version: printf('%d.%d', v:version / 100, v:version % 100)},
    rootUri: FileUri(root),
    capabilities: {
      textDocument: {inlineCompletion: {}, synchronization: {didSave: true}},
      workspace: {executeCommand: {}},
    },
    initializationOptions: type(opts) == v:t_dict ? opts : {},
  }
  Send('initialize', params, OnInitialize)
  return true
enddef

def OnInitialize(msg: dict<any>)
  if has_key(msg, 'error')
    Warn('moelsp: initialize failed: ' .. get(msg.error, 'message', string(msg.error)))
    return
  endif
  const caps = get(get(msg, 'result', {}), 'capabilities', {})
  if !has_key(caps, 'inlineCompletionProvider')
    Log('the server does not offer inline completion')
  endif
  initialized = true
  Notify('initialized', {})
  for [buf, d] in items(docs)
    Open(str2nr(buf))
  endfor
enddef

def OnMessage(msg: dict<any>)
  const method = get(msg, 'method', '')
  if method == ''
    return   # a response nobody waits for
  endif
  if has_key(msg, 'id')
    # A request from the server: nothing here needs one, answer politely.
    if method == 'window/workDoneProgress/create' || method == 'client/registerCapability'
      ch_sendexpr(chan, {id: msg.id, result: null})
    else
      ch_sendexpr(chan, {id: msg.id, error: {code: -32601, message: 'not supported by the Vim client: ' .. method}})
    endif
    return
  endif
  const params = get(msg, 'params', {})
  if method == 'moelsp/status'
    OnStatus(params)
  elseif method == '$/progress'
    chat.OnProgress(params)
  elseif method == 'window/logMessage' || method == 'window/showMessage'
    Log(get(params, 'message', ''))
  endif
enddef

def OnStatus(params: dict<any>)
  status = params
  const state = get(params, 'state', '')
  if state == 'error' && !error_shown
    error_shown = true
    Warn('moelsp: ' .. get(params, 'message', 'error') .. ' (:MoeLog for details)')
  elseif state == 'ready'
    Log('ready: ' .. get(params, 'message', ''))
  endif
enddef

def OnExit(code: number)
  Log('server exited with ' .. code)
  const expected = stopping
  job = null_job
  chan = null_channel
  initialized = false
  ghost.OnServerExit()
  status = {state: 'stopped', message: 'exited with ' .. code}
  if !expected && code != 0
    Warn('moelsp: the server exited with ' .. code .. ' (:MoeLog for its messages, :MoeRestart to start it again)')
  endif
enddef

export def Stop()
  if !Running()
    return
  endif
  stopping = true
  ch_evalexpr(chan, {method: 'shutdown'}, {timeout: 500})
  Notify('exit', {})
enddef

export def Restart()
  Stop()
  const t0 = reltime()
  while job != null_job && job_status(job) == 'run' && reltimefloat(reltime(t0)) < 2.0
    sleep 20m
  endwhile
  if job != null_job && job_status(job) == 'run'
    job_stop(job)
  endif
  error_shown = false
  job = null_job
  chan = null_channel
  if Start()
    echomsg 'moelsp: restarted'
  endif
enddef

# A synchronous request for scripts and tests: the response message ({} on timeout).
export def Request(method: string, params: any, timeout: number = 5000): dict<any>
  if !Running()
    return {}
  endif
  return ch_evalexpr(chan, {method: method, params: params}, {timeout: timeout})
enddef

export def Status(): dict<any>
  return status
enddef

export def StatusLine(): string
  const state = get(status, 'state', 'stopped')
  return state == 'ready' ? 'moelsp' : 'moelsp: ' .. state
enddef

# ---- documents -------------------------------------------------------------------

def Wanted(buf: number): bool
  if getbufvar(buf, '&buftype') != '' || !getbufvar(buf, 'moelsp_enabled', true)
    return false
  endif
  const ft = getbufvar(buf, '&filetype')
  const fts = get(g:, 'moelsp_filetypes', default_filetypes)
  return ft != '' && (index(fts, '*') >= 0 || index(fts, ft) >= 0)
enddef

export def OnFileType(buf: number)
  if !Wanted(buf)
    if has_key(docs, buf)
      Close(buf)
    endif
    return
  endif
  if has_key(docs, buf)
    const ft = getbufvar(buf, '&filetype')
    if docs[buf].languageId == get(language_ids, ft, ft)
      return
    endif
    Close(buf)   # the language changed: open it again
  endif
  Attach(buf)
enddef

def Attach(buf: number)
  const ft = getbufvar(buf, '&filetype')
  docs[buf] = {uri: Uri(buf), languageId: get(language_ids, ft, ft), version: 0, tick: -1, opened: false}
  if Start() && initialized
    Open(buf)
  endif
enddef

def Open(buf: number)
  if !has_key(docs, buf) || !bufloaded(buf)
    return
  endif
  var d = docs[buf]
  d.version += 1
  d.tick = getbufvar(buf, 'changedtick')
  d.opened = true
  Notify('textDocument/didOpen', {textDocument: {uri: d.uri, languageId: d.languageId, version: d.version,
    text: DocText(buf)}})
enddef

def Close(buf: number)
  if !has_key(docs, buf)
    return
  endif
  if docs[buf].opened && initialized
    Notify('textDocument/didClose', {textDocument: {uri: docs[buf].uri}})
  endif
  remove(docs, buf)
enddef

# Send the buffer's text if it changed since the server last saw it (full sync).
export def Sync(buf: number)
  if !has_key(docs, buf) || !initialized || !bufloaded(buf)
    return
  endif
  var d = docs[buf]
  if !d.opened
    Open(buf)
    return
  endif
  const tick = getbufvar(buf, 'changedtick')
  if tick == d.tick
    return
  endif
  d.tick = tick
  d.version += 1
  Notify('textDocument/didChange', {textDocument: {uri: d.uri, version: d.version},
    contentChanges: [{text: DocText(buf)}]})
enddef

export def OnBufUnload(buf: number)
  ghost.OnBufUnload(buf)
  Close(buf)
enddef

export def OnBufRename(buf: number)
  if has_key(docs, buf)
    Close(buf)
    OnFileType(buf)
  endif
enddef

export def OnBufWrite(buf: number)
  if has_key(docs, buf) && initialized
    Sync(buf)
    Notify('textDocument/didSave', {textDocument: {uri: docs[buf].uri}})
  endif
enddef

export def OnTextChanged(buf: number)
  Sync(buf)
enddef

# For the other moelsp scripts: the server answered initialize, the buffer is attached.
export def Ready(): bool
  return initialized
enddef

export def Attached(buf: number): bool
  return has_key(docs, buf)
enddef

# ---- suggestions (autoload/moelsp/ghost.vim) -------------------------------------

export def OnInsertEnter()
  ghost.OnInsertEnter()
enddef

export def OnInsertChange(changed: bool)
  ghost.OnInsertChange(changed)
enddef

export def OnInsertLeave()
  ghost.OnInsertLeave()
enddef

export def Suggest()
  ghost.Suggest()
enddef

export def Cycle(step: number)
  ghost.Cycle(step)
enddef

# Expression-mapping helpers: return the keys that insert (part of) the
# suggestion, or `fallback` when none shows.
export def Accept(fallback: string = ''): string
  return ghost.Accept(fallback)
enddef

export def AcceptWord(fallback: string = ''): string
  return ghost.AcceptWord(fallback)
enddef

export def AcceptLine(fallback: string = ''): string
  return ghost.AcceptLine(fallback)
enddef

export def Inserted(): string
  return ghost.Inserted()
enddef

export def Dismiss()
  ghost.Dismiss()
enddef

export def DismissKey(fallback: string = ''): string
  return ghost.DismissKey(fallback)
enddef

# The suggestion shown, for scripts and tests: {buf, lnum, col, text, items} or {}.
export def Suggestion(): dict<any>
  return ghost.Suggestion()
enddef

export def Toggle()
  ghost.Toggle()
enddef

# The server's controls (every client gets the same): a snooze and manual
# mode.  A suggestion asked for (<M-\>) is still answered.
# :MoeSnooze [minutes]: none as you type for that long (5; 0 resumes).
export def Snooze(minutes: string = '')
  if !Running() || !initialized
    Warn('moelsp: the server is not running')
    return
  endif
  if minutes !~ '^\s*\(\d\+\(\.\d*\)\=\)\=\s*$'
    Warn('moelsp: :MoeSnooze takes minutes (a number; 0 ends a snooze), not ' .. string(minutes))
    return
  endif
  const m = trim(minutes) == '' ? 5.0 : str2float(minutes)
  const r = Request('workspace/executeCommand', {command: 'moelsp.snooze', arguments: [m]})
  if has_key(r, 'error')
    Warn('moelsp: ' .. get(r.error, 'message', 'snooze failed'))
    return
  endif
  FreshStatus()   # the server's status, with its snoozeLeftMs
  echomsg m > 0 ? printf('moelsp: no suggestions as you type for %g min', m) : 'moelsp: suggestions resumed'
enddef

export def OnOff(lead: string, line: string, pos: number): string
  return "on\noff"
enddef

# :MoeManual [on|off]: suggestions only when asked (the server's
# completion.trigger); toggles without an argument.  Kept in
# g:moelsp_init_options, so a restarted server starts the same way.
export def Manual(arg: string = '')
  var opts = get(g:, 'moelsp_init_options', {})
  var comp = get(opts, 'completion', {})
  const on = arg == '' ? get(comp, 'trigger', 'automatic') != 'manual' : arg == 'on'
  comp.trigger = on ? 'manual' : 'automatic'
  opts.completion = comp
  g:moelsp_init_options = opts
  if Running() && initialized
    Notify('workspace/didChangeConfiguration', {settings: {moelsp: {completion: {trigger: comp.trigger}}}})
  endif
  echomsg on ? 'moelsp: suggestions only when asked (<M-\>)' : 'moelsp: suggestions as you type'
enddef

# ---- chat (autoload/moelsp/chat.vim) ---------------------------------------------

export def Chat(question: string, fresh: bool, range_count: number, line1: number, line2: number)
  chat.Ask(question, fresh, range_count, line1, line2)
enddef

export def ChatInfo(): dict<any>
  return chat.Info()
enddef

# ---- status and log --------------------------------------------------------------

def Scratch(name: string, lines: list<string>)
  var buf = bufnr(name)
  if buf < 0
    buf = bufadd(name)
    setbufvar(buf, '&buftype', 'nofile')
    setbufvar(buf, '&bufhidden', 'hide')
    setbufvar(buf, '&swapfile', false)
    bufload(buf)
  endif
  if bufwinnr(buf) < 0
    execute 'botright sbuffer ' .. buf
  else
    win_gotoid(win_findbuf(buf)[0])
  endif
  deletebufline(buf, 1, '$')
  setbufline(buf, 1, lines)
  normal! G
enddef

# The server's status, fetched anew when it runs (the notifications may lag).
def FreshStatus(): dict<any>
  if Running() && initialized
    const r = Request('moelsp/status', {}, 1000)
    if type(get(r, 'result', 0)) == v:t_dict
      status = r.result
    endif
  endif
  return status
enddef

# What this editor adds to the server's words: it alone knows that automatic
# suggestions are off here.
def EditorNote(): string
  return get(g:, 'moelsp_enabled', true) ? '' : ' [automatic suggestions off]'
enddef

# The server's status line (summaryLine: the same words every editor shows);
# without one (no server, or it stopped) the state in its shape.
def ServerLine(s: dict<any>): string
  const line = get(s, 'summaryLine', '')
  if type(line) == v:t_string && line != ''
    return line
  endif
  return 'moelsp ' .. get(s, 'state', 'stopped') .. (get(s, 'message', '') != '' ? ' (' .. s.message .. ')' : '')
enddef

# :MoeStatus.
export def StatusText(): string
  return ServerLine(FreshStatus()) .. EditorNote()
enddef

# :MoeStatus! shows the server's whole status (summary) in a window.
export def ShowStatus(full: bool)
  if !full
    echo StatusText()
    return
  endif
  const s = FreshStatus()
  const summary = get(s, 'summary', '')
  var lines = ['# moelsp' .. (root == '' ? '' : '  ' .. root), '']
  if type(summary) == v:t_string && summary != ''
    lines += split(substitute(summary, '\n\+$', '', ''), "\n", true)
  else
    lines->add(ServerLine(s))
  endif
  lines += ['', '## this editor',
    printf('suggestions:  automatic %s (:MoeToggle), debounce %d ms', get(g:, 'moelsp_enabled', true) ? 'on' : 'off',
      get(g:, 'moelsp_debounce_ms', 75))]
  Scratch('moelsp://status', lines)
enddef

export def ShowLog()
  Scratch('moelsp://log', empty(log_lines) ? ['(no messages yet)'] : log_lines)
enddef

export def LogLines(): list<string>
  return copy(log_lines)
enddef

# The URI the server knows a buffer by ('' when not attached).
export def BufferUri(buf: number): string
  return has_key(docs, buf) ? docs[buf].uri : ''
enddef

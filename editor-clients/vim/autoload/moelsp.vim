vim9script
# moelsp for Vim 9: the LSP client (job + channel in 'lsp' mode), document
# sync, inline suggestions shown as ghost text (text properties with virtual
# text; a popup on Vim builds without it), accept/dismiss keys, chat and status.
#
# Settings (read when used, so they can change at any time):
#   g:moelsp_command       'moelsp' (a string: the executable, started with
#                          `lsp`) or a list: the whole command line
#   g:moelsp_filetypes     filetypes to attach to; ['*'] for all
#   g:moelsp_init_options  dict sent as initializationOptions
#   g:moelsp_enabled       automatic suggestions on (true) or off
#   g:moelsp_debounce_ms   idle time in insert mode before asking (75)

const default_filetypes = ['python', 'c', 'cpp', 'cuda', 'objc', 'objcpp', 'rust', 'go', 'java', 'kotlin',
  'scala', 'cs', 'javascript', 'javascriptreact', 'typescript', 'typescriptreact', 'lua', 'sh', 'bash', 'zsh',
  'ruby', 'perl', 'php', 'swift', 'dart', 'haskell', 'ocaml', 'elixir', 'erlang', 'julia', 'r', 'zig', 'nim',
  'vim', 'sql', 'html', 'css', 'scss', 'json', 'yaml', 'toml', 'make', 'cmake', 'dockerfile', 'markdown', 'tex']
# Vim filetype -> LSP languageId where they differ.
const language_ids = {sh: 'shellscript', bash: 'shellscript', zsh: 'shellscript', cs: 'csharp', make: 'makefile',
  objc: 'objective-c', objcpp: 'objective-cpp', tex: 'latex', cuda: 'cuda-cpp'}
const use_virtual_text = has('patch-9.0.0185')  # virtual text (`text:`) that follows the cursor reliably

var job: job = null_job
var chan: channel = null_channel
var initialized = false
var stopping = false
var status: dict<any> = {state: 'stopped', message: ''}
var error_shown = false
var log_lines: list<string> = []
var docs: dict<dict<any>> = {}   # bufnr -> {uri, languageId, version, tick, opened}

var debounce_timer = 0
var inflight = 0          # id of the completion request in flight
var ghost: dict<any> = {} # the suggestion shown: buf, lnum, col, before, text, del, item, items, index, rendered
var popup_ids: list<number> = []   # the fallback display on Vim without virtual text
var to_insert = ''

var chat_token = ''
var chat_id = 0
var chat_messages: list<dict<string>> = []
var chat_info: dict<any> = {updates: 0, done: true, text: '', error: ''}
var chat_count = 0

# ---- small helpers ---------------------------------------------------------------

def Log(line: string)
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

def Enabled(): bool
  return get(g:, 'moelsp_enabled', true) && getbufvar(bufnr(), 'moelsp_enabled', true)
enddef

# LSP positions count UTF-16 code units.
def Utf16Len(s: string): number
  var n = 0
  for c in str2list(s)
    n += c > 0xFFFF ? 2 : 1
  endfor
  return n
enddef

# Byte offset in `s` of UTF-16 column `u`.
def ByteOfUtf16(s: string, u: number): number
  var n = 0
  var b = 0
  for c in str2list(s)
    if n >= u
      break
    endif
    n += c > 0xFFFF ? 2 : 1
    b += len(nr2char(c))
  endfor
  return b
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

def Notify(method: string, params: any)
  if Running()
    ch_sendexpr(chan, {method: method, params: params})
  endif
enddef

# An asynchronous request; returns its id (0 when not sent).
def Send(method: string, params: any, Callback: func): number
  if !Running()
    return 0
  endif
  const r = ch_sendexpr(chan, {method: method, params: params}, {callback: (_, msg) => Callback(msg)})
  return type(r) == v:t_dict ? get(r, 'id', 0) : 0
enddef

def CancelRequest(id: number)
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
  const opts = get(g:, 'moelsp_init_options', {})
  const params = {
    processId: getpid(),
    clientInfo: {name: 'vim', version: printf('%d.%d', v:version / 100, v:version % 100)},
    rootUri: FileUri(getcwd()),
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
    if chat_token != '' && get(params, 'token', '') == chat_token
      OnChatText(get(get(params, 'value', {}), 'text', ''))
    endif
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
  inflight = 0
  Clear()
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
def Sync(buf: number)
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
  if !empty(ghost) && ghost.buf == buf
    Clear()
  endif
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

# ---- suggestions -----------------------------------------------------------------

def ClearProps()
  if empty(ghost)
    return
  endif
  if use_virtual_text && bufexists(ghost.buf)
    try
      prop_remove({type: 'MoelspGhost', bufnr: ghost.buf, all: true})
    catch
    endtry
  endif
  for id in popup_ids
    popup_close(id)
  endfor
  popup_ids = []
  ghost.rendered = false
enddef

# Forget the suggestion (and any request for one).
def Clear()
  ClearProps()
  ghost = {}
  if debounce_timer > 0
    timer_stop(debounce_timer)
    debounce_timer = 0
  endif
  if inflight > 0
    CancelRequest(inflight)
    inflight = 0
  endif
enddef

def Display(s: string): string
  return substitute(s, "\t", repeat(' ', &tabstop), 'g')
enddef

def Render()
  ClearProps()
  if empty(ghost) || ghost.text == '' || pumvisible()
    return
  endif
  const lines = split(ghost.text, "\n", true)
  if use_virtual_text
    if empty(prop_type_get('MoelspGhost'))
      prop_type_add('MoelspGhost', {highlight: 'MoelspSuggestion'})
    endif
    try
      if lines[0] != ''
        prop_add(ghost.lnum, ghost.col, {type: 'MoelspGhost', text: Display(lines[0]), bufnr: ghost.buf})
      endif
      for l in lines[1 :]
        prop_add(ghost.lnum, 0, {type: 'MoelspGhost', text: l == '' ? ' ' : Display(l), text_align: 'below',
          bufnr: ghost.buf})
      endfor
    catch
      Log('cannot show the suggestion: ' .. v:exception)
      ClearProps()
      ghost = {}
      return
    endtry
  else
    # The first line at the cursor, the others below it from the text's left edge.
    const opts = {highlight: 'MoelspSuggestion', wrap: false, zindex: 50}
    if lines[0] != ''
      popup_ids->add(popup_create(Display(lines[0]), extend({line: 'cursor', col: 'cursor'}, opts)))
    endif
    if len(lines) > 1
      const left = win_screenpos(0)[1] + getwininfo(win_getid())[0].textoff
      popup_ids->add(popup_create(mapnew(lines[1 :], (_, l) => Display(l)),
        extend({line: 'cursor+1', col: left}, opts)))
    endif
  endif
  ghost.rendered = true
  if !get(ghost, 'shown', false)
    ghost.shown = true
    Notify('moelsp/didShowCompletion', {item: ghost.item})
  endif
enddef

def LineBefore(): string
  return strpart(getline('.'), 0, col('.') - 1)
enddef

# The suggestion is for this exact spot.
def AtGhost(): bool
  return !empty(ghost) && mode() == 'i' && bufnr() == ghost.buf && line('.') == ghost.lnum
    && col('.') == ghost.col && LineBefore() ==# ghost.before
enddef

export def OnInsertEnter()
  Clear()
  Schedule()
enddef

# TextChangedI (changed) and CursorMovedI: keep the suggestion if the cursor is
# where it was shown, or the user typed its first characters; else drop it and
# (after a change) ask again.
export def OnInsertChange(changed: bool)
  if AtGhost()
    if !get(ghost, 'rendered', false)
      Render()
    endif
    return
  endif
  if !empty(ghost) && bufnr() == ghost.buf && line('.') == ghost.lnum
    const before = LineBefore()
    if stridx(before, ghost.before) == 0
      const typed = strpart(before, len(ghost.before))
      if typed != '' && len(typed) < len(ghost.text) && stridx(ghost.text, typed) == 0
        ghost.text = strpart(ghost.text, len(typed))
        ghost.before = before
        ghost.col = col('.')
        Render()
        return
      endif
    endif
  endif
  Clear()
  if changed
    Schedule()
  endif
enddef

export def OnInsertLeave()
  Clear()
  if has_key(docs, bufnr())
    Sync(bufnr())
  endif
enddef

def Schedule()
  if debounce_timer > 0
    timer_stop(debounce_timer)
    debounce_timer = 0
  endif
  if !Enabled() || !has_key(docs, bufnr()) || !initialized
    return
  endif
  debounce_timer = timer_start(get(g:, 'moelsp_debounce_ms', 75), (_) => Ask(2))
enddef

# Ask for a suggestion at the cursor; kind 1 = invoked (alternatives), 2 = automatic.
def Ask(kind: number)
  debounce_timer = 0
  const buf = bufnr()
  if mode() != 'i' || !has_key(docs, buf) || !initialized || get(status, 'state', '') == 'error'
    return
  endif
  Sync(buf)
  if inflight > 0
    CancelRequest(inflight)   # superseded
  endif
  const before = LineBefore()
  const ctx = {buf: buf, lnum: line('.'), col: col('.'), before: before, tick: b:changedtick}
  const params = {textDocument: {uri: docs[buf].uri},
    position: {line: line('.') - 1, character: Utf16Len(before)},
    context: {triggerKind: kind}}
  var id = 0
  id = Send('textDocument/inlineCompletion', params, (msg) => OnSuggestions(ctx, msg))
  inflight = id
enddef

def OnSuggestions(ctx: dict<any>, msg: dict<any>)
  if get(msg, 'id', -1) != inflight
    return   # superseded or cancelled
  endif
  inflight = 0
  if has_key(msg, 'error')
    if get(msg.error, 'code', 0) != -32800
      Log('inlineCompletion: ' .. get(msg.error, 'message', string(msg.error)))
    endif
    return
  endif
  if mode() != 'i' || bufnr() != ctx.buf || line('.') != ctx.lnum || col('.') != ctx.col
      || b:changedtick != ctx.tick
    return   # the user moved on; a newer request follows the change
  endif
  const result = get(msg, 'result', {})
  const raw = type(result) == v:t_dict ? get(result, 'items', []) : type(result) == v:t_list ? result : []
  var found: list<dict<any>> = []
  const curline = getline('.')
  const cur = ctx.col - 1
  for item in raw
    const s = ItemShape(item, curline, cur, ctx.lnum - 1)
    if !empty(s)
      found->add(s)
    endif
  endfor
  if empty(found)
    return
  endif
  ClearProps()
  ghost = {buf: ctx.buf, lnum: ctx.lnum, col: ctx.col, before: ctx.before, items: found, index: 0}
  Pick(0)
enddef

# What to show for an item: the text after the cursor, and how many characters
# after the cursor it replaces. {} when it cannot be shown here.
def ItemShape(item: any, curline: string, cur: number, lnum0: number): dict<any>
  if type(item) != v:t_dict || type(get(item, 'insertText', 0)) != v:t_string
    return {}
  endif
  var text: string = item.insertText
  var del = 0
  if type(get(item, 'range', 0)) == v:t_dict
    const r = item.range
    if r.start.line != lnum0 || r.end.line != lnum0
      return {}
    endif
    const a = ByteOfUtf16(curline, r.start.character)
    const b = ByteOfUtf16(curline, r.end.character)
    if a > cur || b < cur
      return {}
    endif
    const typed = strpart(curline, a, cur - a)
    if stridx(text, typed) != 0
      return {}
    endif
    text = strpart(text, len(typed))
    del = strchars(strpart(curline, cur, b - cur))
  endif
  if text == ''
    return {}
  endif
  return {text: text, del: del, item: item}
enddef

def Pick(index: number)
  const s = ghost.items[index]
  ghost.index = index
  ghost.text = s.text
  ghost.del = s.del
  ghost.item = s.item
  ghost.shown = false
  Render()
enddef

export def Suggest()
  if mode() != 'i' || !has_key(docs, bufnr())
    return
  endif
  Clear()
  Ask(1)
enddef

export def Cycle(step: number)
  if !AtGhost() || len(ghost.items) < 2 || get(ghost, 'partial', false)
    return
  endif
  Pick((ghost.index + step + len(ghost.items)) % len(ghost.items))
enddef

# Expression-mapping helpers: return the keys that insert (part of) the
# suggestion, or `fallback` when none shows.
export def Accept(fallback: string = ''): string
  return AcceptPart('all', fallback)
enddef

export def AcceptWord(fallback: string = ''): string
  return AcceptPart('word', fallback)
enddef

export def AcceptLine(fallback: string = ''): string
  return AcceptPart('line', fallback)
enddef

def AcceptPart(what: string, fallback: string): string
  if !AtGhost() || !get(ghost, 'rendered', false) || ghost.text == '' || pumvisible()
    return fallback
  endif
  const text: string = ghost.text
  var part = text
  if what == 'word'
    part = matchstr(text, '^\_s*\%(\k\+\|\%(\k\@!\S\)\+\)')
  elseif what == 'line'
    part = text =~ '^\n' ? matchstr(text, '^\n[^\n]*') : matchstr(text, '^[^\n]*')
  endif
  if part == ''
    part = text
  endif
  const rest = strpart(text, len(part))
  const keys = repeat("\<Del>", ghost.del) .. "\<C-R>\<C-O>=moelsp#Inserted()\<CR>"
  to_insert = part
  ClearProps()
  if rest == ''
    const item = ghost.item
    ghost = {}
    var params = {command: get(get(item, 'command', {}), 'command', 'moelsp.accepted')}
    const args = get(get(item, 'command', {}), 'arguments', null)
    if args != null
      params.arguments = args
    endif
    Send('workspace/executeCommand', params, (_) => 0)
  else
    Notify('textDocument/didPartiallyAcceptCompletion', {item: ghost.item, acceptedLength: Utf16Len(part)})
    # Where the cursor will be once `part` is in: the rest shows there.
    const nl = count(part, "\n")
    ghost.lnum += nl
    ghost.before = nl > 0 ? matchstr(part, '[^\n]*$') : ghost.before .. part
    ghost.col = len(ghost.before) + 1
    ghost.text = rest
    ghost.del = 0
    ghost.partial = true
  endif
  return keys
enddef

export def Inserted(): string
  const s = to_insert
  to_insert = ''
  return s
enddef

export def Dismiss()
  Clear()
enddef

export def DismissKey(fallback: string = ''): string
  if empty(ghost) || !get(ghost, 'rendered', false)
    Clear()
    return fallback
  endif
  Clear()
  return ''
enddef

# The suggestion shown, for scripts and tests: {lnum, col, text, items} or {}.
export def Suggestion(): dict<any>
  if empty(ghost) || !get(ghost, 'rendered', false)
    return {}
  endif
  return {buf: ghost.buf, lnum: ghost.lnum, col: ghost.col, text: ghost.text,
    items: mapnew(ghost.items, (_, s) => s.item)}
enddef

export def Toggle()
  g:moelsp_enabled = !get(g:, 'moelsp_enabled', true)
  if !g:moelsp_enabled
    Clear()
  endif
  echomsg 'moelsp: automatic suggestions ' .. (g:moelsp_enabled ? 'on' : 'off')
enddef

# ---- chat ------------------------------------------------------------------------

def ChatBuffer(): number
  var buf = bufnr('moelsp://chat')
  if buf < 0
    buf = bufadd('moelsp://chat')
    setbufvar(buf, '&buftype', 'nofile')
    setbufvar(buf, '&bufhidden', 'hide')
    setbufvar(buf, '&swapfile', false)
    bufload(buf)
    setbufvar(buf, '&filetype', 'markdown')
    setbufline(buf, 1, '# moelsp chat  (:MoeChat! starts a new conversation)')
  endif
  if bufwinnr(buf) < 0
    const win = win_getid()
    execute 'botright sbuffer ' .. buf
    win_gotoid(win)
  endif
  return buf
enddef

def ChatAppend(lines: list<string>)
  const buf = ChatBuffer()
  appendbufline(buf, '$', lines)
  ChatFollow(buf)
enddef

def ChatFollow(buf: number)
  for w in win_findbuf(buf)
    win_execute(w, 'normal! G')
  endfor
enddef

export def Chat(question: string, fresh: bool, range_count: number, line1: number, line2: number)
  const buf = bufnr()
  if !Start()
    return
  endif
  if fresh
    chat_messages = []
  endif
  if chat_id > 0
    CancelRequest(chat_id)
    chat_id = 0
  endif
  var params: dict<any> = {}
  if range_count > 0 && has_key(docs, buf)
    Sync(buf)
    params.uri = docs[buf].uri
    params.range = {start: {line: line1 - 1, character: 0},
      end: {line: line2 - 1, character: Utf16Len(getline(line2))}}
  endif
  chat_count += 1
  chat_token = 'moelsp-chat-' .. chat_count
  params.partialResultToken = chat_token
  params.messages = chat_messages + [{role: 'user', content: question}]
  chat_info = {updates: 0, done: false, text: '', error: ''}
  ChatAppend(['', '## You' .. (range_count > 0 ? printf(' (lines %d-%d of %s)', line1, line2, bufname(buf)) : ''),
    '', question, '', '## moelsp', ''])
  if !initialized
    # The request waits in the channel behind initialize.
    Log('chat: asked before the server answered initialize')
  endif
  const asked = question
  chat_id = Send('moelsp/chat', params, (msg) => OnChatDone(asked, msg))
enddef

def OnChatText(text: string)
  if text == '' || chat_info.done
    return
  endif
  chat_info.updates += 1
  chat_info.text ..= text
  const buf = ChatBuffer()
  const pieces = split(text, "\n", true)
  const last = getbufinfo(buf)[0].linecount
  setbufline(buf, last, getbufline(buf, last)[0] .. pieces[0])
  if len(pieces) > 1
    appendbufline(buf, last, pieces[1 :])
  endif
  ChatFollow(buf)
enddef

def OnChatDone(question: string, msg: dict<any>)
  if get(msg, 'id', -1) != chat_id
    return
  endif
  chat_id = 0
  chat_token = ''
  chat_info.done = true
  if has_key(msg, 'error')
    chat_info.error = get(msg.error, 'message', string(msg.error))
    ChatAppend(['', '(error: ' .. chat_info.error .. ')'])
    return
  endif
  const r = get(msg, 'result', {})
  const text = get(r, 'text', '')
  if chat_info.text == '' && text != ''   # nothing streamed: show the answer now
    ChatAppend(split(text, "\n", true))
    chat_info.text = text
  endif
  chat_messages += [{role: 'user', content: question}, {role: 'assistant', content: text}]
  ChatAppend(['', printf('_(%s, %.1f tokens/s)_', get(r, 'finishReason', '?'), 0.0 + get(r, 'tokensPerSecond', 0.0))])
enddef

export def ChatInfo(): dict<any>
  return chat_info
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

export def StatusText(): string
  if Running() && initialized
    const r = Request('moelsp/status', {}, 1000)
    if type(get(r, 'result', 0)) == v:t_dict
      status = r.result
    endif
  endif
  const s = status
  var out = 'moelsp: ' .. get(s, 'state', 'stopped')
  if get(s, 'model', '') != ''
    out ..= ', model ' .. s.model
  endif
  if get(s, 'tokensPerSecond', 0) > 0
    out ..= printf(', %.0f tokens/s', 0.0 + s.tokensPerSecond)
  endif
  const c = get(s, 'completions', {})
  if !empty(c)
    out ..= printf(', completions: %d asked, %d shown, %d accepted', get(c, 'requests', 0), get(c, 'shown', 0),
      get(c, 'accepted', 0))
    const lat = get(c, 'latencyMs', {})
    if get(lat, 'samples', 0) > 0
      out ..= printf(', latency p50 %.0f ms p95 %.0f ms', 0.0 + lat.p50, 0.0 + lat.p95)
    endif
  endif
  if get(s, 'state', '') != 'ready' && get(s, 'message', '') != ''
    out ..= ' (' .. s.message .. ')'
  endif
  if !get(g:, 'moelsp_enabled', true)
    out ..= ' [automatic suggestions off]'
  endif
  return out
enddef

export def ShowStatus(full: bool)
  const text = StatusText()
  if full
    var lines = [text, '']
    for [key, val] in items(status)
      lines->add(key .. ': ' .. json_encode(val))
    endfor
    Scratch('moelsp://status', lines)
  else
    echo text
  endif
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

vim9script
# moelsp for Vim 9: inline suggestions.  Asks the server for a suggestion
# (textDocument/inlineCompletion) while you type, shows it as ghost text (text
# properties with virtual text; a popup on Vim builds without it), and the
# accept / accept-word / accept-line / dismiss / cycle keys.  The server, the
# channel and document sync are in autoload/moelsp.vim; plugin/moelsp.vim calls
# in through the moelsp#... functions there.

import autoload 'moelsp.vim'

const use_virtual_text = has('patch-9.0.0185')  # virtual text (`text:`) that follows the cursor reliably

var debounce_timer = 0
var inflight = 0          # id of the completion request in flight
var ghost: dict<any> = {} # the suggestion shown: buf, lnum, col, before, text, del, item, items, index, rendered
var popup_ids: list<number> = []   # the fallback display on Vim without virtual text
var to_insert = ''

# ---- helpers -------------------------------------------------------------------

def Enabled(): bool
  return get(g:, 'moelsp_enabled', true) && getbufvar(bufnr(), 'moelsp_enabled', true)
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

# ---- showing and forgetting the suggestion ---------------------------------------

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
    moelsp.CancelRequest(inflight)
    inflight = 0
  endif
enddef

# For autoload/moelsp.vim: the buffer goes away, the server exited.
export def OnBufUnload(buf: number)
  if !empty(ghost) && ghost.buf == buf
    Clear()
  endif
enddef

export def OnServerExit()
  inflight = 0
  Clear()
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
      moelsp.Log('cannot show the suggestion: ' .. v:exception)
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
    moelsp.Notify('moelsp/didShowCompletion', {item: ghost.item})
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

# ---- insert-mode events and requests ---------------------------------------------

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
  if moelsp.Attached(bufnr())
    moelsp.Sync(bufnr())
  endif
enddef

def Schedule()
  if debounce_timer > 0
    timer_stop(debounce_timer)
    debounce_timer = 0
  endif
  if !Enabled() || !moelsp.Attached(bufnr()) || !moelsp.Ready()
    return
  endif
  debounce_timer = timer_start(get(g:, 'moelsp_debounce_ms', 75), (_) => Ask(2))
enddef

# Ask for a suggestion at the cursor; kind 1 = invoked (alternatives), 2 = automatic.
def Ask(kind: number)
  debounce_timer = 0
  const buf = bufnr()
  if mode() != 'i' || !moelsp.Attached(buf) || !moelsp.Ready()
      || get(moelsp.Status(), 'state', '') == 'error'
    return
  endif
  moelsp.Sync(buf)
  if inflight > 0
    moelsp.CancelRequest(inflight)   # superseded
  endif
  const before = LineBefore()
  const ctx = {buf: buf, lnum: line('.'), col: col('.'), before: before, tick: b:changedtick}
  const params = {textDocument: {uri: moelsp.BufferUri(buf)},
    position: {line: line('.') - 1, character: moelsp.Utf16Len(before)},
    context: {triggerKind: kind}}
  var id = 0
  id = moelsp.Send('textDocument/inlineCompletion', params, (msg) => OnSuggestions(ctx, msg))
  inflight = id
enddef

def OnSuggestions(ctx: dict<any>, msg: dict<any>)
  if get(msg, 'id', -1) != inflight
    return   # superseded or cancelled
  endif
  inflight = 0
  if has_key(msg, 'error')
    if get(msg.error, 'code', 0) != -32800
      moelsp.Log('inlineCompletion: ' .. get(msg.error, 'message', string(msg.error)))
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

# ---- keys and commands -----------------------------------------------------------

export def Suggest()
  if mode() != 'i' || !moelsp.Attached(bufnr())
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
  const keys = repeat("\<Del>", ghost.del) .. "\<C-R>\<C-O>=moelsp#ghost#Inserted()\<CR>"
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
    moelsp.Send('workspace/executeCommand', params, (_) => 0)
  else
    moelsp.Notify('textDocument/didPartiallyAcceptCompletion',
      {item: ghost.item, acceptedLength: moelsp.Utf16Len(part)})
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

# The suggestion shown, for scripts and tests: {buf, lnum, col, text, items} or {}.
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

vim9script
# The Vim 9 plugin (editor-clients/vim) against a real `moelsp lsp` with its
# embedded default model.  Vim must run in a terminal (insert mode, timers,
# redraws), so start it through the runner, which gives it a pseudo-terminal:
#
#   MOELSP_BINARY=build/cli/moelsp /usr/bin/python3 editor-clients/tests/run_vim9_test.py
#
# By hand: vim -Nu NONE -i NONE -n --not-a-term -S editor-clients/tests/vim9_test.vim
# (in a terminal; MOELSP_BINARY set).  Progress and the verdict go to
# $MOELSP_VIM9_RESULT (default /tmp/moelsp_vim9_test.log); Vim exits 0 when
# every check passed, 1 otherwise.
#
# The checks run as steps from a repeating timer, so Vim's main loop (and its
# insert mode) runs in between: keys are fed with feedkeys() as if typed.

const result_file = getenv('MOELSP_VIM9_RESULT') ?? '/tmp/moelsp_vim9_test.log'
const binary = getenv('MOELSP_BINARY') ?? ''
const here = expand('<sfile>:p:h')
var out: list<string> = []
var failed = false

def Out(line: string)
  out->add(strftime('%H:%M:%S ') .. line)
  writefile(out, result_file)
enddef

def Fail(msg: string)
  if failed
    return
  endif
  failed = true
  Out('FAIL: ' .. msg)
  Out('--- plugin log ---')
  try
    for l in moelsp#LogLines()
      Out(l)
    endfor
  catch
  endtry
  Out('--- messages ---')
  for l in split(execute('messages'), "\n")
    Out(l)
  endfor
  cquit 1
enddef

def Check(cond: bool, msg: string)
  if !cond
    throw 'check failed: ' .. msg
  endif
enddef

# At the top level a failed check ends the test at once.
def Require(cond: bool, msg: string)
  if !cond
    Fail('check failed: ' .. msg)
  endif
enddef

writefile([], result_file)
# Set first, so that even a script error below ends Vim with a verdict.
timer_start(120000, (_) => Fail('the whole test took over 120 s (or the test script has an error)'))
if binary == '' || !executable(binary)
  Fail('set MOELSP_BINARY to the moelsp executable (got ' .. string(binary) .. ')')
endif

Require(mode() == 'n', 'Vim must run in a terminal, not in Ex mode (-e/-es): use run_vim9_test.py')
set nomore shortmess+=F cmdheight=3 updatetime=100 noswapfile
execute 'set rtp^=' .. fnameescape(fnamemodify(here, ':h') .. '/vim')
filetype on
g:moelsp_command = binary        # a string: started as [binary, 'lsp']
g:moelsp_debounce_ms = 50
runtime plugin/moelsp.vim
Require(exists(':MoeChat') == 2 && exists(':MoeStatus') == 2, 'the plugin defined its commands')
Require(maparg('<Tab>', 'i') =~ 'moelsp#Accept', '<Tab> is mapped in insert mode')

const dir = tempname()
mkdir(dir, 'p')
const file = dir .. '/main.py'
writefile(['import os', '', '', 'def main():', ''], file)
execute 'edit ' .. fnameescape(file)
Require(&filetype == 'python', 'the test file is python')

# ---- the steps --------------------------------------------------------------------

var steps: list<dict<any>> = []
var current = 0
var started = reltime()
var asked_explicitly = false
var first_text = ''      # the suggestion shown first (all lines)
var kind_used = 2
var word_rest = ''
var word_line = ''
var typed = ''
var typed_rest = ''

def Step(name: string, timeout_s: float, Wait: func, Do: func)
  steps->add({name: name, timeout: timeout_s, Wait: Wait, Do: Do})
enddef

def Elapsed(): float
  return reltimefloat(reltime(started))
enddef

def Tick(_: number)
  if failed || current >= len(steps)
    return
  endif
  const s = steps[current]
  try
    if s.Wait()
      Out(printf('ok (%.1f s): %s', Elapsed(), s.name))
      current += 1
      started = reltime()
      s.Do()
    elseif Elapsed() > s.timeout
      Fail(printf('timed out after %.0f s: %s (mode %s, line 5 %s, suggestion %s)', s.timeout, s.name, mode(),
        string(getline(5)), string(moelsp#Suggestion())))
    endif
  catch
    Fail(s.name .. ': ' .. v:exception .. ' (' .. v:throwpoint .. ')')
  endtry
enddef

def ScreenLine(row: number): string
  return substitute(join(mapnew(range(1, &columns), (_, c) => screenstring(row, c)), ''), '\s\+$', '', '')
enddef

def GhostProps(lnum: number): list<dict<any>>
  return filter(prop_list(lnum), (_, p) => p.type == 'MoelspGhost')
enddef

def Suggestion(): dict<any>
  return moelsp#Suggestion()
enddef

# Wait for a suggestion on line 5; after 8 s of none, ask explicitly
# (triggerKind 1) once: the default model may have nothing to say automatically.
def SuggestionShown(): bool
  if !empty(Suggestion())
    return true
  endif
  if Elapsed() > 8.0 && !asked_explicitly && mode() == 'i'
    asked_explicitly = true
    kind_used = 1
    Out('no automatic suggestion yet: asking with triggerKind 1')
    moelsp#Suggest()
  endif
  return false
enddef

def Ready(): bool
  const st = moelsp#Status()
  if st.state == 'error' || (st.state == 'stopped' && get(st, 'message', '') =~ '^exited')
    throw 'the server is not running: ' .. string(st)
  endif
  return st.state == 'ready'
enddef

Step('the server is ready', 60.0, Ready, () => {
  Check(moelsp#BufferUri(bufnr()) =~ '^file:///.*main\.py$', 'the buffer is attached')
  Out('model: ' .. get(moelsp#Status(), 'model', '?'))
  normal! G
  feedkeys("A    ", 'mt')    # type four spaces at the end of the function
})

Step('a suggestion shows while typing', 30.0, SuggestionShown, () => {
  const sug = Suggestion()
  Check(mode() == 'i', 'still in insert mode, got ' .. mode())
  Check(sug.lnum == 5 && sug.col == 5, 'at the cursor: ' .. string(sug))
  first_text = sug.text
  const first = split(first_text, "\n", true)[0]
  Out('suggestion: ' .. json_encode(first_text))
  # The server's own answer for this spot (its cache answers the same context).
  const r = moelsp#Request('textDocument/inlineCompletion', {textDocument: {uri: moelsp#BufferUri(bufnr())},
    position: {line: 4, character: 4}, context: {triggerKind: kind_used}}, 20000)
  Check(type(get(r, 'result', 0)) == v:t_dict && !empty(r.result.items), 'the server answers: ' .. string(r))
  const server_first = split(r.result.items[0].insertText, "\n", true)[0]
  Check(first ==# server_first, 'ghost text ' .. string(first) .. ' is the server''s first line ' .. string(server_first))
  # The text property, and what the terminal shows.
  const props = GhostProps(5)
  if first != ''
    Check(len(filter(copy(props), (_, p) => p.col == 5)) == 1, 'a MoelspGhost property at the cursor: ' .. string(props))
  endif
  Check(len(props) == len(split(first_text, "\n", true)) - (first == '' ? 1 : 0),
    'one property per suggested line: ' .. string(props))
  redraw
  const row = screenpos(win_getid(), 5, 1).row
  Out('screen: ' .. json_encode(mapnew(range(row, row + 2), (_, n) => ScreenLine(n))))
  Check(ScreenLine(row) ==# substitute('    ' .. first, '\s\+$', '', ''), 'the screen shows ' .. string(ScreenLine(row)))
  const rest = split(first_text, "\n", true)[1 :]
  if !empty(rest)
    Check(ScreenLine(row + 1) ==# substitute(rest[0], '\s\+$', '', ''),
      'the next line is shown below: ' .. string(ScreenLine(row + 1)))
  endif
  feedkeys("\<Tab>", 'mt')
})

Step('<Tab> accepts it', 10.0, () => join(getline(5, '$'), "\n") ==# '    ' .. first_text, () => {
  Check(mode() == 'i', 'still in insert mode after <Tab>')
  Check(empty(GhostProps(5)) || !empty(Suggestion()), 'no stale ghost text')
  # Back to the four spaces: leave insert mode, undo, type them again.
  feedkeys("\<Esc>u", 'mt')
})

Step('undo restores the file', 10.0, () => mode() == 'n' && getline(5) == '' && line('$') == 5, () => {
  asked_explicitly = false
  feedkeys("A    ", 'mt')
})

Step('the suggestion shows again', 30.0, SuggestionShown, () => {
  const text = Suggestion().text
  # Type its first character: the rest must stay, without a new request.
  typed = text =~ '^\k\k' ? strpart(text, 0, 1) : ''
  if typed == ''
    Out('(type-through skipped: the suggestion does not start with a word)')
  endif
  typed_rest = strpart(text, len(typed))
  feedkeys(typed, 'mt')
})

Step('typing its first character keeps the rest', 10.0,
  () => getline(5) ==# '    ' .. typed && get(Suggestion(), 'text', '') ==# typed_rest, () => {
  const word = matchstr(typed_rest, '^\k\+')
  if word != '' && len(word) < len(typed_rest)
    word_line = '    ' .. typed .. word
    word_rest = strpart(typed_rest, len(word))
    feedkeys("\<C-Right>", 'mt')
  else
    Out('(accept-word skipped: the suggestion does not start with a word followed by more text)')
    word_line = '    ' .. typed
    word_rest = typed_rest
  endif
})

Step('<C-Right> accepts one word, the rest stays', 10.0,
  () => getline(5) ==# word_line && get(Suggestion(), 'text', '') ==# word_rest, () => {
  Check(!empty(GhostProps(5)), 'the rest is still shown')
  feedkeys("\<C-]>", 'mt')
})

Step('<C-]> dismisses it', 10.0, () => empty(Suggestion()) && empty(GhostProps(5)), () => {
  Check(getline(5) ==# word_line, 'dismiss leaves the text: ' .. string(getline(5)))
  Check(mode() == 'i', 'still in insert mode after <C-]>')
  feedkeys("\<Tab>", 'mt')   # no suggestion: an ordinary <Tab>
})

Step('<Tab> without a suggestion inserts a tab', 10.0, () => getline(5) ==# word_line .. "\t", () => {
  feedkeys("\<Esc>", 'mt')
})

Step('back in normal mode', 10.0, () => mode() == 'n' && empty(Suggestion()), () => {
  const r = moelsp#Request('moelsp/status', {}, 5000)
  const c = r.result.completions
  Out('telemetry: ' .. json_encode(c))
  Check(c.shown >= 2, 'the server counted the suggestions shown')
  Check(c.accepted >= 1, 'the server counted the accepted suggestion')
  if word_line != '    ' .. typed
    Check(c.partiallyAccepted >= 1, 'the server counted the partial acceptance')
  endif
  MoeChat What does the function main do?
  Check(bufnr('moelsp://chat') > 0 && bufwinnr(bufnr('moelsp://chat')) > 0, 'the chat buffer shows')
  Check(bufnr() != bufnr('moelsp://chat'), 'the cursor stays in the code')
})

Step(':MoeChat streams the answer', 90.0, () => moelsp#ChatInfo().done, () => {
  const info = moelsp#ChatInfo()
  Out(printf('chat: %d updates, %s', info.updates, json_encode(info.text)))
  Check(info.error == '', 'chat error: ' .. info.error)
  Check(info.updates > 1, 'more than one streamed update')
  const lines = getbufline(bufnr('moelsp://chat'), 1, '$')
  const at = index(lines, '## moelsp')
  Check(at > 0, 'the answer heading')
  Check(stridx(join(lines[at + 1 :], "\n"), trim(info.text)) >= 0, 'the streamed text is in the chat buffer')
  # :MoeStatus echoes the server's own line (summaryLine), :MoeStatus! shows
  # its summary, then what only this editor knows.
  const line = moelsp#Request('moelsp/status', {}, 5000).result.summaryLine
  const st = execute('MoeStatus')
  Out('status: ' .. trim(st))
  Check(trim(st) ==# line, ':MoeStatus is the server''s line ' .. string(line))
  Check(st =~ 'moelsp ready', ':MoeStatus says ready')
  const code_win = win_getid()
  MoeStatus!
  const full = getline(1, '$')
  Out('full status: ' .. json_encode(full))
  Check(bufname() == 'moelsp://status', ':MoeStatus! opens its window')
  Check(full[0] =~ '^# moelsp  /', 'the root heading: ' .. full[0])
  Check(match(full, '^state:\s\+ready') >= 0 && match(full, '^completions:\s\+\d\+ requests') >= 0,
    ':MoeStatus! shows the server''s summary')
  Check(full[-2 :] == ['## this editor', 'suggestions:  automatic on (:MoeToggle), debounce 50 ms'],
    ':MoeStatus! ends with this editor''s side: ' .. string(full[-2 :]))
  close
  win_gotoid(code_win)
  MoeToggle
  Check(!g:moelsp_enabled, ':MoeToggle turns suggestions off')
  Check(execute('MoeStatus') =~ '\[automatic suggestions off\]', ':MoeStatus says they are off here')
  MoeToggle
  Check(g:moelsp_enabled, ':MoeToggle turns them on again')
  # The server's controls: a snooze answers nothing as you type (the model's
  # request count stays), :MoeResume ends it, :MoeManual reaches the server.
  MoeSnooze 1
  Check(execute('MoeStatus') =~ 'snoozed for', ':MoeStatus shows the snooze')
  const asked = moelsp#Request('moelsp/status', {}, 5000).result.completions.requests
  const auto = {textDocument: {uri: moelsp#BufferUri(bufnr())}, position: {line: 4, character: 4},
    context: {triggerKind: 2}}
  Check(empty(moelsp#Request('textDocument/inlineCompletion', auto, 20000).result.items), 'nothing while snoozed')
  Check(moelsp#Request('moelsp/status', {}, 5000).result.completions.requests == asked, 'snoozed: the model was asked')
  MoeResume
  Check(moelsp#Request('moelsp/status', {}, 5000).result.completions.snoozeLeftMs == 0, ':MoeResume ends it')
  moelsp#Request('textDocument/inlineCompletion', auto, 20000)
  Check(moelsp#Request('moelsp/status', {}, 5000).result.completions.requests == asked + 1, 'resumed: asked again')
  MoeManual on
  Check(moelsp#Request('moelsp/status', {}, 5000).result.completions.trigger == 'manual', ':MoeManual on')
  Check(execute('MoeStatus') =~ 'only when asked', ':MoeStatus shows manual mode')
  MoeManual off
  Check(moelsp#Request('moelsp/status', {}, 5000).result.completions.trigger == 'automatic', ':MoeManual off')
  MoeLog
  Check(bufname() == 'moelsp://log' && line('$') > 1, ':MoeLog shows the log')
  Out('PASS')
  qall!
})

timer_start(50, Tick, {repeat: -1})

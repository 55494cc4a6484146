vim9script
# moelsp for Vim 9: :MoeChat.  Sends the conversation (and the selected lines)
# as moelsp/chat and streams the answer ($/progress with a partialResultToken)
# into the moelsp://chat window.

import autoload 'moelsp.vim'

var chat_token = ''
var chat_id = 0
var chat_messages: list<dict<string>> = []
var chat_info: dict<any> = {updates: 0, done: true, text: '', error: ''}
var chat_count = 0

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

# :MoeChat (moelsp#Chat).
export def Ask(question: string, fresh: bool, range_count: number, line1: number, line2: number)
  const buf = bufnr()
  if !moelsp.Start()
    return
  endif
  if fresh
    chat_messages = []
  endif
  if chat_id > 0
    moelsp.CancelRequest(chat_id)
    chat_id = 0
  endif
  var params: dict<any> = {}
  if range_count > 0 && moelsp.Attached(buf)
    moelsp.Sync(buf)
    params.uri = moelsp.BufferUri(buf)
    params.range = {start: {line: line1 - 1, character: 0},
      end: {line: line2 - 1, character: moelsp.Utf16Len(getline(line2))}}
  endif
  chat_count += 1
  chat_token = 'moelsp-chat-' .. chat_count
  params.partialResultToken = chat_token
  params.messages = chat_messages + [{role: 'user', content: question}]
  chat_info = {updates: 0, done: false, text: '', error: ''}
  ChatAppend(['', '## You' .. (range_count > 0 ? printf(' (lines %d-%d of %s)', line1, line2, bufname(buf)) : ''),
    '', question, '', '## moelsp', ''])
  if !moelsp.Ready()
    # The request waits in the channel behind initialize.
    moelsp.Log('chat: asked before the server answered initialize')
  endif
  const asked = question
  chat_id = moelsp.Send('moelsp/chat', params, (msg) => OnChatDone(asked, msg))
enddef

# For autoload/moelsp.vim: a $/progress notification, maybe a piece of the answer.
export def OnProgress(params: any)
  if chat_token != '' && get(params, 'token', '') == chat_token
    OnChatText(get(get(params, 'value', {}), 'text', ''))
  endif
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

# The last answer, for scripts and tests (moelsp#ChatInfo).
export def Info(): dict<any>
  return chat_info
enddef

vim9script
# moelsp for Vim 9: inline code suggestions (ghost text) and chat from a
# local `moelsp lsp` server, over Vim's built-in LSP channel mode.
# The work is in autoload/moelsp.vim (with autoload/moelsp/ghost.vim and
# autoload/moelsp/chat.vim behind it); this file only wires settings,
# autocommands, commands and keys.  See README.md next to this directory.

if exists('g:loaded_moelsp')
  finish
endif
g:loaded_moelsp = 1

if v:version < 900 || !has('channel') || !has('job') || !has('timers') || !has('textprop')
  echohl WarningMsg
  echomsg 'moelsp: needs Vim 9.0 with +channel, +job, +timers and +textprop'
  echohl None
  finish
endif

highlight default link MoelspSuggestion Comment

augroup moelsp
  autocmd!
  autocmd FileType * moelsp#OnFileType(str2nr(expand('<abuf>')))
  autocmd BufUnload * moelsp#OnBufUnload(str2nr(expand('<abuf>')))
  autocmd BufFilePost * moelsp#OnBufRename(str2nr(expand('<abuf>')))
  autocmd BufWritePost * moelsp#OnBufWrite(str2nr(expand('<abuf>')))
  autocmd TextChanged * moelsp#OnTextChanged(str2nr(expand('<abuf>')))
  autocmd InsertEnter * moelsp#OnInsertEnter()
  autocmd TextChangedI * moelsp#OnInsertChange(true)
  autocmd CursorMovedI * moelsp#OnInsertChange(false)
  autocmd CompleteChanged * moelsp#Dismiss()
  autocmd InsertLeave,BufLeave * moelsp#OnInsertLeave()
  autocmd ColorScheme * highlight default link MoelspSuggestion Comment
  autocmd VimLeavePre * moelsp#Stop()
augroup END

command! -bang -range -nargs=+ MoeChat moelsp#Chat(<q-args>, <bang>0, <range>, <line1>, <line2>)
command! -bang -nargs=0 MoeStatus moelsp#ShowStatus(<bang>0)
command! -nargs=0 MoeToggle moelsp#Toggle()
command! -nargs=? MoeSnooze moelsp#Snooze(<q-args>)
command! -nargs=0 MoeResume moelsp#Snooze('0')
command! -nargs=? -complete=custom,moelsp#OnOff MoeManual moelsp#Manual(<q-args>)
command! -nargs=0 MoeLog moelsp#ShowLog()
command! -nargs=0 MoeRestart moelsp#Restart()

# <Plug> keys for your own mappings; each does nothing when no suggestion shows.
inoremap <silent><expr> <Plug>(moelsp-accept) moelsp#Accept()
inoremap <silent><expr> <Plug>(moelsp-accept-word) moelsp#AcceptWord()
inoremap <silent><expr> <Plug>(moelsp-accept-line) moelsp#AcceptLine()
inoremap <silent><expr> <Plug>(moelsp-dismiss) moelsp#DismissKey()
inoremap <silent> <Plug>(moelsp-suggest) <Cmd>call moelsp#Suggest()<CR>
inoremap <silent> <Plug>(moelsp-next) <Cmd>call moelsp#Cycle(1)<CR>
inoremap <silent> <Plug>(moelsp-previous) <Cmd>call moelsp#Cycle(-1)<CR>

# Default keys: each falls back to the key's usual meaning when no
# suggestion shows.  <Tab> is left alone when something already maps it.
if !get(g:, 'moelsp_no_maps', false)
  if !get(g:, 'moelsp_no_tab_map', false) && empty(mapcheck('<Tab>', 'i'))
    inoremap <silent><expr> <Tab> moelsp#Accept("\<lt>Tab>")
  endif
  if empty(mapcheck('<C-Right>', 'i'))
    inoremap <silent><expr> <C-Right> moelsp#AcceptWord("\<lt>C-Right>")
  endif
  if empty(mapcheck('<C-L>', 'i'))
    inoremap <silent><expr> <C-L> moelsp#AcceptLine("\<lt>C-L>")
  endif
  if empty(mapcheck('<C-]>', 'i'))
    inoremap <silent><expr> <C-]> moelsp#DismissKey("\<lt>C-]>")
  endif
  if empty(mapcheck('<M-\>', 'i'))
    inoremap <silent> <M-\> <Cmd>call moelsp#Suggest()<CR>
  endif
  if empty(mapcheck('<M-]>', 'i'))
    inoremap <silent> <M-]> <Cmd>call moelsp#Cycle(1)<CR>
  endif
endif

# Loaded late (packadd after startup): attach the buffers already open.
if v:vim_did_enter
  for info in getbufinfo({bufloaded: 1})
    if getbufvar(info.bufnr, "&filetype") != ""
      moelsp#OnFileType(info.bufnr)
    endif
  endfor
endif

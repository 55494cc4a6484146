-- Inline completions (ghost text).
--
-- Neovim 0.12+ has vim.lsp.inline_completion: with inline = "auto" it shows
-- and accepts the suggestions, and the plugin adds accept-word/line on top.
-- Older releases get the plugin's own implementation: a debounced
-- textDocument/inlineCompletion request as you type (the previous one is
-- cancelled with $/cancelRequest), the answer drawn with extmarks in the
-- "moelsp_ghost" namespace -- its first line at the cursor (virt_text_pos
-- 'inline' on 0.10+, 'overlay' at the end of the line before that, 'eol' when
-- text follows the cursor), the next lines as virt_lines -- and dismissed when
-- the cursor moves away, when leaving insert mode, or with the dismiss key.
local util = require("moelsp.util")
local config = require("moelsp.config")

local api = vim.api
local M = {}

M.ns = api.nvim_create_namespace("moelsp_ghost")
M.enabled = true

-- bufnr -> {
--   client_id, timer, seq, pending = { client_id, id },
--   items = { candidate... }, index,        -- what is shown (nil: nothing)
--   tick,                                   -- changedtick the plugin last saw
--   row, col,                               -- where the ghost text starts (0-based, byte)
--   mapped,                                 -- keymaps installed
-- }
-- candidate = { item, client_id, text (still to insert), after (text after the
--   cursor the item replaces), shown_sent }
local buffers = {}

local function now_ms()
  return util.uv.hrtime() / 1e6
end

local function use_builtin()
  local mode = config.get().inline
  if mode == "extmark" then return false end
  local ic = vim.lsp.inline_completion
  local available = ic ~= nil and type(ic.enable) == "function" and type(ic.get) == "function"
  if mode == "builtin" then return available end
  return available and util.has("nvim-0.12")
end
M.use_builtin = use_builtin

local function state(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and api.nvim_get_current_buf() or bufnr
  return buffers[bufnr], bufnr
end

local function cursor()
  local pos = api.nvim_win_get_cursor(0)
  return pos[1] - 1, pos[2]
end

local function current_line(bufnr, row)
  return api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ""
end

-- ---------------------------------------------------------------------------
-- drawing

local function clear(bufnr)
  if api.nvim_buf_is_valid(bufnr) then pcall(api.nvim_buf_clear_namespace, bufnr, M.ns, 0, -1) end
end

local function draw(bufnr, s)
  clear(bufnr)
  local c = s.items and s.items[s.index]
  if not c then return end
  local o = config.get()
  local ts = vim.bo[bufnr].tabstop
  local lines = util.split_lines(c.text)
  local line = current_line(bufnr, s.row)
  local col = math.min(s.col, #line)
  local opts = {
    virt_text = { { util.expand_tabs(lines[1], ts), o.hl_group } },
    hl_mode = "combine",
    priority = 200,
  }
  if util.has("nvim-0.10") then
    opts.virt_text_pos = "inline"
  elseif col >= #line then
    opts.virt_text_pos = "overlay"
  else
    -- Text follows the cursor and 0.7-0.9 cannot push it aside: show the
    -- suggestion after the end of the line.
    opts.virt_text_pos = "eol"
  end
  if #lines > 1 then
    local vl = {}
    for i = 2, #lines do
      vl[#vl + 1] = { { util.expand_tabs(lines[i], ts), o.hl_group } }
    end
    opts.virt_lines = vl
  end
  local ok, id = pcall(api.nvim_buf_set_extmark, bufnr, M.ns, s.row, col, opts)
  s.extmark = ok and id or nil
end

-- ---------------------------------------------------------------------------
-- requests

local function cancel_pending(s)
  if s.pending then
    local c = util.get_client(s.pending.client_id)
    if c then pcall(util.cancel, c, s.pending.id) end
    s.pending = nil
  end
end

local function stop_timer(s)
  if s.timer then s.timer:stop() end
end

--- Hides the ghost text of `bufnr` (the request in flight goes on).
local function hide(bufnr, s)
  s.items, s.index = nil, nil
  clear(bufnr)
end

--- Hides the suggestion, cancels the request in flight and the pending timer.
--- Returns true when a suggestion was visible.
function M.dismiss(bufnr)
  local s
  s, bufnr = state(bufnr)
  if not s then return false end
  local visible = s.items ~= nil
  stop_timer(s)
  cancel_pending(s)
  s.seq = (s.seq or 0) + 1
  hide(bufnr, s)
  return visible
end

local function send_shown(c)
  if c.shown_sent then return end
  c.shown_sent = true
  local client = util.get_client(c.client_id)
  if client then pcall(util.notify, client, "moelsp/didShowCompletion", { item = c.item }) end
end

local function candidates(bufnr, row, col, items, client)
  local line = current_line(bufnr, row)
  local out, seen = {}, {}
  for _, item in ipairs(items or {}) do
    local text = item.insertText
    if type(text) == "table" then text = text.value end -- a snippet: shown as its text
    if type(text) == "string" and text ~= "" then
      local start_col, end_col = col, col
      local ok = true
      if type(item.range) == "table" and item.range.start then
        local r = item.range
        if r.start.line ~= row or r["end"].line ~= row then
          ok = false
        else
          start_col = util.byte_col(line, r.start.character)
          end_col = util.byte_col(line, r["end"].character)
          if start_col > col or end_col < col then ok = false end
        end
      end
      if ok then
        -- The part of the range before the cursor is what the user already typed.
        local typed = line:sub(start_col + 1, col)
        if text:sub(1, #typed) == typed then
          local rest = text:sub(#typed + 1)
          if rest ~= "" and not seen[rest] then
            seen[rest] = true
            out[#out + 1] = { item = item, client_id = client.id, text = rest, after = line:sub(col + 1, end_col) }
          end
        end
      end
    end
  end
  return out
end

-- Remembers where the ghost text stands: row, column, the line around it
-- and the buffer's changedtick (events for exactly that state are ours).
local function anchor(bufnr, s, row, col)
  local line = current_line(bufnr, row)
  s.row, s.col = row, col
  s.before, s.after_line = line:sub(1, col), line:sub(col + 1)
  s.tick = api.nvim_buf_get_changedtick(bufnr)
end

local function show(bufnr, s, items, row, col)
  s.items, s.index = items, 1
  anchor(bufnr, s, row, col)
  draw(bufnr, s)
  send_shown(items[1])
  util.user_event("MoelspSuggestion")
end

--- Sends textDocument/inlineCompletion for the cursor now.
--- kind: 2 automatic (typing), 1 invoked (asked for: up to 3 alternatives).
function M.request(bufnr, kind)
  local s
  s, bufnr = state(bufnr)
  if not s then return end
  if api.nvim_get_current_buf() ~= bufnr then return end
  local client = util.get_client(s.client_id)
  if not client then return end
  local st = require("moelsp.client").state(client.id)
  if st ~= nil and st ~= "ready" and st ~= "busy" then
    if kind == 1 then util.info("the model is " .. st .. " (:MoeStatus)") end
    return
  end
  stop_timer(s)
  cancel_pending(s)
  s.seq = (s.seq or 0) + 1
  local seq = s.seq
  local row, col = cursor()
  local tick = api.nvim_buf_get_changedtick(bufnr)
  local params = {
    textDocument = { uri = vim.uri_from_bufnr(bufnr) },
    position = util.position(bufnr, row, col),
    context = { triggerKind = kind or 2 },
  }
  local request_id
  local ok, id = util.request(client, "textDocument/inlineCompletion", params, function(err, result)
    if s.pending and s.pending.id == request_id then s.pending = nil end
    if seq ~= s.seq then return end -- superseded
    if err then
      if err.code ~= -32800 and kind == 1 then util.warn(err.message or vim.inspect(err)) end
      return
    end
    if not api.nvim_buf_is_valid(bufnr) or api.nvim_get_current_buf() ~= bufnr then return end
    if not util.in_insert_mode() or api.nvim_buf_get_changedtick(bufnr) ~= tick then return end
    local r, c = cursor()
    if r ~= row or c ~= col then return end
    local items = type(result) == "table" and (result.items or result) or {}
    local cands = candidates(bufnr, row, col, items, client)
    if #cands == 0 then
      if kind == 1 then util.info("no suggestion here") end
      return
    end
    show(bufnr, s, cands, row, col)
  end, bufnr)
  if ok then
    request_id = id
    s.pending = { client_id = client.id, id = id }
    s.requested_at = now_ms()
  end
end

--- Asks after the debounce delay (a newer call restarts the delay).
function M.schedule(bufnr)
  local s
  s, bufnr = state(bufnr)
  if not s or not M.enabled or use_builtin() then return end
  local delay = config.get().debounce or 0
  if not s.timer then s.timer = util.uv.new_timer() end
  s.timer:stop()
  s.timer:start(delay, 0, vim.schedule_wrap(function()
    if not buffers[bufnr] or not M.enabled then return end
    if api.nvim_get_current_buf() ~= bufnr or not util.in_insert_mode() then return end
    if vim.fn.pumvisible() == 1 then return end
    M.request(bufnr, 2)
  end))
end

--- Asks now, as an explicit request (alternatives); shows the next
--- alternative when a suggestion with several is visible.
function M.trigger(bufnr)
  local s
  s, bufnr = state(bufnr)
  if not s then
    local client = require("moelsp.client").attach(bufnr, true)
    if not client then return end
    s, bufnr = state(bufnr)
    if not s then return end
  end
  M.request(bufnr, 1)
end

function M.cycle(bufnr, step)
  local s
  s, bufnr = state(bufnr)
  if s and s.items and #s.items > 1 then
    s.index = (s.index - 1 + step) % #s.items + 1
    draw(bufnr, s)
    send_shown(s.items[s.index])
    return true
  end
  if use_builtin() and M.builtin_visible(bufnr) and vim.lsp.inline_completion.select then
    pcall(vim.lsp.inline_completion.select, { bufnr = bufnr, count = step })
    return true
  end
  -- Nothing to cycle through: ask now (with Neovim's own inline completion
  -- too, since it has no public "ask now"; the answer is drawn by the plugin).
  M.trigger(bufnr)
  return true
end

--- Whether Neovim's own inline completion (0.12+) shows a suggestion in `bufnr`.
function M.builtin_visible(bufnr)
  local ns = api.nvim_get_namespaces()["nvim.lsp.inline_completion"]
  if not ns then return false end
  local ok, marks = pcall(api.nvim_buf_get_extmarks, bufnr, ns, 0, -1, { limit = 1 })
  return ok and #marks > 0
end

-- ---------------------------------------------------------------------------
-- accepting

--- The text that `what` ("all" | "word" | "line") takes from `text`.
function M.portion(text, what)
  if what == "all" then return text end
  if what == "line" then
    local nl = text:find("\n", 1, true)
    if not nl then return text end
    if nl == 1 then
      -- The suggestion starts a new line: take it with the next one.
      local nl2 = text:find("\n", 2, true)
      return nl2 and text:sub(1, nl2 - 1) or text
    end
    return text:sub(1, nl - 1)
  end
  -- word: leading blanks (a line break included) and one word, or one run of
  -- punctuation.
  local lead = text:match("^[ \t]*\n?[ \t]*") or ""
  local body = text:sub(#lead + 1)
  local word = body:match("^[%w_]+") or body:match("^[^%w_%s]+") or ""
  local piece = lead .. word
  if piece == "" then piece = text:sub(1, 1) end
  return piece
end

-- Inserts `text` at the cursor (replacing `after_len` bytes after it) and
-- puts the cursor after it.
local function insert_at_cursor(bufnr, row, col, text, after_len)
  local lines = util.split_lines(text)
  local line = current_line(bufnr, row)
  local end_col = math.min(#line, col + (after_len or 0))
  api.nvim_buf_set_text(bufnr, row, col, row, end_col, lines)
  local new_row = row + #lines - 1
  local new_col = (#lines == 1 and col or 0) + #lines[#lines]
  api.nvim_win_set_cursor(0, { new_row + 1, new_col })
  return new_row, new_col
end

local function accept_ours(bufnr, s, what)
  local c = s.items[s.index]
  local row, col = cursor()
  if row ~= s.row or col ~= s.col then
    M.dismiss(bufnr)
    return false
  end
  local piece = M.portion(c.text, what)
  local full = piece == c.text
  local client = util.get_client(c.client_id)
  if full then
    M.dismiss(bufnr)
    insert_at_cursor(bufnr, row, col, piece, #c.after)
    -- The item's command tells the server the suggestion was taken.
    if client then
      local cmd = c.item.command
      if type(cmd) == "table" and cmd.command then
        util.request(client, "workspace/executeCommand",
          { command = cmd.command, arguments = cmd.arguments }, function() end, bufnr)
      else
        util.notify(client, "moelsp/didAcceptCompletion", { item = c.item })
      end
    end
    -- TextChangedI follows and asks for what comes next.
  else
    local new_row, new_col = insert_at_cursor(bufnr, row, col, piece, 0)
    c.text = c.text:sub(#piece + 1)
    c.accepted = (c.accepted or 0) + #piece
    -- Keep the rest on screen; the events of this change are ours.
    s.items, s.index = { c }, 1
    anchor(bufnr, s, new_row, new_col)
    draw(bufnr, s)
    if client then
      util.notify(client, "textDocument/didPartiallyAcceptCompletion",
        { item = c.item, acceptedLength = c.accepted })
    end
  end
  return true
end

-- Partial accept of Neovim's own inline item (0.12+).
local function accept_builtin_partial(bufnr, item, what)
  local text = item.insert_text
  if type(text) == "table" then text = text.value end
  if type(text) ~= "string" then return end
  local row, col = cursor()
  local line = current_line(bufnr, row)
  local r = item.range
  if r and r.start and r.start.row == row and r.start.col and r.start.col <= col then
    local typed = line:sub(r.start.col + 1, col)
    if text:sub(1, #typed) == typed then text = text:sub(#typed + 1) end
  end
  local piece = M.portion(text, what)
  if piece ~= "" then insert_at_cursor(bufnr, row, col, piece, 0) end
end

--- Accepts all / a word / a line of the visible suggestion. Returns false
--- (and does nothing) when none is visible.
function M.accept(what, bufnr)
  what = what or "all"
  local s
  s, bufnr = state(bufnr)
  if s and s.items then return accept_ours(bufnr, s, what) end
  return false
end

--- Whether a suggestion of the plugin is visible in `bufnr`.
function M.is_visible(bufnr)
  local s = state(bufnr)
  return s ~= nil and s.items ~= nil
end

--- The visible suggestion: { text = still to insert, item = server item } or nil.
function M.current(bufnr)
  local s = state(bufnr)
  if not s or not s.items then return nil end
  local c = s.items[s.index]
  return { text = c.text, item = c.item, row = s.row, col = s.col, index = s.index, count = #s.items }
end

--- Whether nothing is pending: no debounce timer running, no request in flight.
function M.is_idle(bufnr)
  local s = state(bufnr)
  if not s then return true end
  local timer_active = s.timer and s.timer:is_active()
  return not timer_active and s.pending == nil
end

-- ---------------------------------------------------------------------------
-- events

local function on_text_changed(bufnr)
  local s = buffers[bufnr]
  if not s then return end
  local tick = api.nvim_buf_get_changedtick(bufnr)
  local row, col = cursor()
  if tick == s.tick and s.items and row == s.row and col == s.col then return end -- our own edit
  -- Type-through: the user typed the start of the suggestion; keep the rest.
  if s.items and row == s.row and col > s.col then
    local c = s.items[s.index]
    local line = current_line(bufnr, row)
    local typed = line:sub(s.col + 1, col)
    local first = util.split_lines(c.text)[1]
    if #typed < #first and first:sub(1, #typed) == typed
        and line == s.before .. typed .. s.after_line then
      c.text = c.text:sub(#typed + 1)
      s.items, s.index = { c }, 1
      anchor(bufnr, s, row, col)
      draw(bufnr, s)
      return
    end
  end
  s.tick = tick
  hide(bufnr, s)
  cancel_pending(s)
  M.schedule(bufnr)
end

local function on_cursor_moved(bufnr)
  local s = buffers[bufnr]
  if not s then return end
  local tick = api.nvim_buf_get_changedtick(bufnr)
  if tick ~= s.tick then return end -- a text change: TextChangedI handles it
  local row, col = cursor()
  if s.items and row == s.row and col == s.col then return end
  if s.items or s.pending then
    hide(bufnr, s)
    cancel_pending(s)
  end
  if config.get().trigger_on_cursor_move then M.schedule(bufnr) else stop_timer(s) end
end

local function on_insert_enter(bufnr)
  local s = buffers[bufnr]
  if not s then return end
  s.tick = api.nvim_buf_get_changedtick(bufnr)
  if config.get().trigger_on_insert_enter then M.schedule(bufnr) end
end

-- ---------------------------------------------------------------------------
-- keymaps

-- What the key did before the plugin mapped it, as an expr-mapping result
-- (key notation: the mapping replaces the keycodes).
local function fallback_for(bufnr, lhs, previous)
  if not previous then return lhs end
  if previous.callback then
    if previous.expr == 1 then
      local ok, keys = pcall(previous.callback)
      if not ok or type(keys) ~= "string" then return "" end
      return keys
    end
    M._fallbacks = M._fallbacks or {}
    M._fallbacks[bufnr .. lhs] = previous.callback
    return string.format("<Cmd>lua require('moelsp.completion')._run_fallback(%d, %q)<CR>", bufnr, lhs)
  end
  local rhs = previous.rhs or ""
  if previous.expr == 1 then
    local ok, keys = pcall(vim.fn.eval, rhs)
    return ok and type(keys) == "string" and keys or ""
  end
  return rhs
end

function M._run_fallback(bufnr, lhs)
  local fn = M._fallbacks and M._fallbacks[bufnr .. lhs]
  if fn then fn() end
end

local function do_cmd(action)
  return "<Cmd>lua require('moelsp.completion')._key('" .. action .. "')<CR>"
end

--- The action of a key, run through <Cmd> (buffers cannot change while an
--- expr mapping is evaluated).
function M._key(action)
  local bufnr = api.nvim_get_current_buf()
  if action == "accept" or action == "accept_word" or action == "accept_line" then
    local what = action == "accept" and "all" or (action == "accept_word" and "word" or "line")
    M.accept(what, bufnr)
  elseif action == "next" then
    M.cycle(bufnr, 1)
  elseif action == "prev" then
    M.cycle(bufnr, -1)
  elseif action == "dismiss" then
    if not M.dismiss(bufnr) and use_builtin() then
      -- Neovim's own suggestion: switching it off and on clears it.
      pcall(vim.lsp.inline_completion.enable, false, { bufnr = bufnr })
      pcall(vim.lsp.inline_completion.enable, M.enabled, { bufnr = bufnr })
    end
  end
end

local function builtin_accept(bufnr, action)
  if not use_builtin() then return false end
  local ic = vim.lsp.inline_completion
  local opts = { bufnr = bufnr }
  if action ~= "accept" then
    local what = action == "accept_word" and "word" or "line"
    opts.on_accept = function(item) accept_builtin_partial(bufnr, item, what) end
  end
  local ok, applied = pcall(ic.get, opts)
  return ok and applied == true
end

local function map_keys(bufnr)
  local keys = config.get().keymaps or {}
  local descs = {
    accept = "moelsp: accept the suggestion",
    accept_word = "moelsp: accept a word of the suggestion",
    accept_line = "moelsp: accept a line of the suggestion",
    next = "moelsp: next suggestion / ask now",
    prev = "moelsp: previous suggestion",
    dismiss = "moelsp: dismiss the suggestion",
  }
  for _, action in ipairs({ "accept", "accept_word", "accept_line", "next", "prev", "dismiss" }) do
    local lhs = keys[action]
    if type(lhs) == "string" and lhs ~= "" then
      -- What the key did before (a buffer-local or global mapping) runs
      -- when there is nothing to accept.
      local previous = vim.fn.maparg(lhs, "i", false, true)
      if type(previous) ~= "table" or vim.tbl_isempty(previous)
          or (type(previous.desc) == "string" and previous.desc:sub(1, 7) == "moelsp:") then
        previous = nil
      end
      vim.keymap.set("i", lhs, function()
        local visible = M.is_visible(bufnr)
        if action == "next" or action == "prev" then return do_cmd(action) end
        if visible then return do_cmd(action) end
        if action ~= "dismiss" and builtin_accept(bufnr, action) then return "" end
        if action == "dismiss" and use_builtin() then return do_cmd(action) end
        return fallback_for(bufnr, lhs, previous)
      end, { buffer = bufnr, expr = true, silent = true, desc = descs[action] })
    end
  end
end

-- ---------------------------------------------------------------------------
-- buffers

--- Called when the moelsp client attaches `bufnr`.
function M.attach(bufnr, client_id)
  local s = buffers[bufnr]
  if s then
    s.client_id = client_id
    return
  end
  s = { client_id = client_id, seq = 0, tick = api.nvim_buf_get_changedtick(bufnr) }
  buffers[bufnr] = s
  local group = api.nvim_create_augroup("moelsp_buf_" .. bufnr, { clear = true })
  local function au(events, fn)
    api.nvim_create_autocmd(events, { group = group, buffer = bufnr, callback = function() fn(bufnr) end })
  end
  au("TextChangedI", on_text_changed)
  -- The other servers' definitions of the names near the cursor, for the
  -- server's context (unless completion.contextTokens is 0).
  local ctx_tokens = ((config.get().init_options or {}).completion or {}).contextTokens
  if ctx_tokens ~= 0 then
    au("TextChangedI", function(b)
      local st = buffers[b]
      if st then require("moelsp.definitions").schedule(b, st.client_id) end
    end)
  end
  au("CursorMovedI", on_cursor_moved)
  au("InsertEnter", on_insert_enter)
  au({ "InsertLeave", "BufLeave" }, function(b) M.dismiss(b) end)
  au("TextChangedP", function(b)
    local st = buffers[b]
    if st then
      st.tick = api.nvim_buf_get_changedtick(b)
      hide(b, st)
      cancel_pending(st)
    end
  end)
  au({ "BufUnload", "BufWipeout" }, function(b) M.detach(b) end)
  map_keys(bufnr)
  if use_builtin() then pcall(vim.lsp.inline_completion.enable, M.enabled, { bufnr = bufnr }) end
end

local function unmap_keys(bufnr)
  if not api.nvim_buf_is_valid(bufnr) then return end
  for _, lhs in pairs(config.get().keymaps or {}) do
    if type(lhs) == "string" and lhs ~= "" then pcall(vim.keymap.del, "i", lhs, { buffer = bufnr }) end
  end
end

function M.detach(bufnr)
  local s = buffers[bufnr]
  if not s then return end
  M.dismiss(bufnr)
  unmap_keys(bufnr)
  require("moelsp.definitions").detach(bufnr)
  if s.timer then
    s.timer:stop()
    if not s.timer:is_closing() then s.timer:close() end
  end
  buffers[bufnr] = nil
  pcall(api.nvim_del_augroup_by_name, "moelsp_buf_" .. bufnr)
end

function M.on_client_exit(client_id)
  for bufnr, s in pairs(buffers) do
    if s.client_id == client_id then
      s.pending = nil
      M.dismiss(bufnr)
    end
  end
end

--- The model of `client_id` became ready: ask for the buffer being typed in.
function M.on_ready(client_id)
  local bufnr = api.nvim_get_current_buf()
  local s = buffers[bufnr]
  if s and s.client_id == client_id and util.in_insert_mode() then M.schedule(bufnr) end
end

function M.attached_buffers()
  local out = {}
  for b in pairs(buffers) do out[#out + 1] = b end
  return out
end

--- Switches inline completions on or off everywhere.
function M.set_enabled(on)
  M.enabled = on and true or false
  for bufnr in pairs(buffers) do
    if not M.enabled then M.dismiss(bufnr) end
    if use_builtin() then pcall(vim.lsp.inline_completion.enable, M.enabled, { bufnr = bufnr }) end
  end
end

return M

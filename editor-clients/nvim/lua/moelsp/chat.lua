-- :MoeChat, :MoeExplain, :MoeFix, :MoeDocument: the answer streams into a
-- scratch buffer (filetype markdown) as the server sends it ($/progress).
-- :MoeChat in a chat buffer goes on with that conversation.
local util = require("moelsp.util")
local config = require("moelsp.config")
local clients = require("moelsp.client")

local api = vim.api
local M = {}

M.sessions = {} -- chat bufnr -> { messages, client_id, request, updates }
local counter = 0

local function open_window(bufnr)
  for _, win in ipairs(api.nvim_list_wins()) do
    if api.nvim_win_get_buf(win) == bufnr then
      api.nvim_set_current_win(win)
      return win
    end
  end
  local where = config.get().chat_window
  if where == "tab" then
    vim.cmd("tabnew")
  elseif where == "horizontal" then
    vim.cmd("botright split")
  elseif where ~= "current" then
    vim.cmd("botright vsplit")
  end
  local win = api.nvim_get_current_win()
  api.nvim_win_set_buf(win, bufnr)
  vim.wo[win].wrap = true
  vim.wo[win].linebreak = true
  return win
end

local function new_buffer()
  counter = counter + 1
  local bufnr = api.nvim_create_buf(false, true)
  vim.bo[bufnr].buftype = "nofile"
  vim.bo[bufnr].bufhidden = "hide"
  vim.bo[bufnr].swapfile = false
  pcall(api.nvim_buf_set_name, bufnr, "moelsp://chat/" .. counter)
  vim.bo[bufnr].filetype = "markdown"
  vim.b[bufnr].moelsp_chat = true
  vim.b[bufnr].moelsp_chat_updates = 0
  vim.b[bufnr].moelsp_chat_done = 0
  M.sessions[bufnr] = { messages = {}, updates = 0 }
  vim.keymap.set("n", "<C-c>", function() M.stop(bufnr) end, { buffer = bufnr, desc = "moelsp: stop the answer" })
  vim.keymap.set("n", "q", "<Cmd>silent! close<CR>", { buffer = bufnr, desc = "moelsp: close the chat window" })
  return bufnr
end

local function append(bufnr, text)
  if not api.nvim_buf_is_valid(bufnr) then return end
  local n = api.nvim_buf_line_count(bufnr)
  -- Windows that follow the end: all but the current one, which follows only
  -- while its cursor is at the end (the user may be reading further up).
  local follow = {}
  for _, win in ipairs(api.nvim_list_wins()) do
    if api.nvim_win_get_buf(win) == bufnr then
      if win ~= api.nvim_get_current_win() or api.nvim_win_get_cursor(win)[1] >= n - 1 then
        follow[#follow + 1] = win
      end
    end
  end
  local last = api.nvim_buf_get_lines(bufnr, n - 1, n, false)[1] or ""
  api.nvim_buf_set_lines(bufnr, n - 1, n, false, util.split_lines(last .. text))
  local count = api.nvim_buf_line_count(bufnr)
  for _, win in ipairs(follow) do
    pcall(api.nvim_win_set_cursor, win, { count, 0 })
  end
end

local function append_lines(bufnr, lines)
  local n = api.nvim_buf_line_count(bufnr)
  local first = api.nvim_buf_get_lines(bufnr, 0, 1, false)[1]
  if n == 1 and first == "" then
    api.nvim_buf_set_lines(bufnr, 0, 1, false, lines)
  else
    api.nvim_buf_set_lines(bufnr, n, n, false, lines)
  end
end

--- Stops the answer being written into `bufnr`.
function M.stop(bufnr)
  local s = M.sessions[bufnr or api.nvim_get_current_buf()]
  if s and s.request then
    local c = util.get_client(s.request.client_id)
    if c then util.cancel(c, s.request.id) end
  end
end

-- The client for a command run from `src` (attaching `src` when it is a file).
local function client_for(src)
  local c = clients.for_buffer(src)
  if c then return c end
  if vim.bo[src].buftype == "" and api.nvim_buf_get_name(src) ~= "" then
    local id = clients.attach(src, true)
    c = util.get_client(id)
    if c then return c end
  end
  c = clients.any(src)
  if c then return c end
  -- No file to attach (e.g. an empty buffer): the server of the cwd.
  return util.get_client(clients.start())
end

-- The LSP range of lines line1..line2 (1-based, inclusive) of `src`.
local function line_range(src, line1, line2)
  local last = api.nvim_buf_get_lines(src, line2 - 1, line2, false)[1] or ""
  return {
    start = { line = line1 - 1, character = 0 },
    ["end"] = { line = line2 - 1, character = util.utf16_col(last, #last) },
  }
end

-- Streams request `method` into `bufnr`. `on_done(text, nil, result)` gets the
-- final text and the whole result, `on_done(nil, err)` the error.
local function stream(bufnr, client, method, params, token, on_done)
  local s = M.sessions[bufnr]
  local streamed = {}
  local answer_start = api.nvim_buf_line_count(bufnr) -- 1-based line where the answer begins
  clients.route_progress(token, function(value)
    if type(value) ~= "table" then return end
    local text = value.text
    if text == nil and value.kind == "report" then text = value.message end
    if type(text) ~= "string" or text == "" then return end
    streamed[#streamed + 1] = text
    s.updates = s.updates + 1
    if api.nvim_buf_is_valid(bufnr) then
      vim.b[bufnr].moelsp_chat_updates = s.updates
      append(bufnr, text)
    end
  end)
  local ok, id = util.request(client, method, params, function(err, result)
    clients.unroute_progress(token)
    s.request = nil
    if not api.nvim_buf_is_valid(bufnr) then return end
    if err then
      local cancelled = err.code == -32800
      append(bufnr, (table.concat(streamed) == "" and "" or "\n\n") ..
        (cancelled and "_(stopped)_" or ("**error:** " .. tostring(err.message))))
      append_lines(bufnr, { "" })
      if on_done then on_done(nil, err) end
    else
      local text = type(result) == "table" and result.text or table.concat(streamed)
      if text ~= table.concat(streamed) then
        -- Some text did not come as progress: show the final answer as is.
        local n = api.nvim_buf_line_count(bufnr)
        local lines = util.split_lines(text)
        api.nvim_buf_set_lines(bufnr, answer_start - 1, n, false, lines)
      end
      local tps = type(result) == "table" and tonumber(result.tokensPerSecond) or nil
      local footer = string.format("_(%s%s)_", type(result) == "table" and result.finishReason or "done",
        tps and tps > 0 and string.format(", %.1f tokens/s", tps) or "")
      append_lines(bufnr, { "", footer, "" })
      vim.b[bufnr].moelsp_chat_result = text
      if on_done then on_done(text, nil, type(result) == "table" and result or {}) end
    end
    vim.b[bufnr].moelsp_chat_done = (vim.b[bufnr].moelsp_chat_done or 0) + 1
    util.user_event("MoelspChatDone")
  end, nil)
  if ok then
    s.request = { client_id = client.id, id = id }
  else
    clients.unroute_progress(token)
    append(bufnr, "**error:** the server is not running")
  end
end

local function next_token(kind)
  counter = counter + 1
  return string.format("moelsp-%s-%d-%d", kind, vim.fn.getpid(), counter)
end

-- Streams `method` into bufnr once the server is ready; on_answer(text, result)
-- gets the final answer (not called on errors or cancellation).
local function stream_when_ready(bufnr, client_id, method, params, token, on_answer)
  clients.when_ready(client_id, function(c, why)
    if not c then
      append(bufnr, "**error:** " .. tostring(why))
      return
    end
    stream(bufnr, c, method, params, token, function(text, _, result)
      if text then on_answer(text, result) end
    end)
  end)
end

--- Asks `question`. opts: { bufnr = source buffer, line1, line2, range = 0|1|2 }
--- (a range gives those lines of the source as context).
function M.chat(question, opts)
  opts = opts or {}
  local src = opts.bufnr or api.nvim_get_current_buf()
  if not question or vim.trim(question) == "" then
    local ui_opts = { prompt = "Ask moelsp: " }
    vim.ui.input(ui_opts, function(input)
      if input and vim.trim(input) ~= "" then M.chat(input, opts) end
    end)
    return
  end
  local session_buf = M.sessions[src] and src or nil
  local client
  if session_buf then
    client = util.get_client(M.sessions[src].client_id) or clients.any()
    if not client then return util.error("no moelsp server is running") end
  else
    client = client_for(src)
    if not client then return end
  end
  local params = { messages = {} }
  local context_note
  if not session_buf and opts.range and opts.range > 0 then
    if clients.for_buffer(src) then
      params.uri = vim.uri_from_bufnr(src)
      params.range = line_range(src, opts.line1, opts.line2)
    else
      -- Not a document the server has: send the lines themselves.
      local lines = api.nvim_buf_get_lines(src, opts.line1 - 1, opts.line2, false)
      question = "Context:\n```" .. vim.bo[src].filetype .. "\n" .. table.concat(lines, "\n") .. "\n```\n\n" .. question
    end
    context_note = string.format("_(context: %s, lines %d-%d)_", vim.fn.fnamemodify(api.nvim_buf_get_name(src), ":~:."),
      opts.line1, opts.line2)
  end
  local bufnr = session_buf or new_buffer()
  local s = M.sessions[bufnr]
  s.client_id = client.id
  if s.request then return util.warn("an answer is still being written here (<C-c> stops it)") end
  local header = { "## You", "", question }
  if context_note then table.insert(header, context_note) end
  vim.list_extend(header, { "", "## moelsp", "", "" })
  append_lines(bufnr, header)
  local win = open_window(bufnr)
  pcall(api.nvim_win_set_cursor, win, { api.nvim_buf_line_count(bufnr), 0 })
  for _, m in ipairs(s.messages) do table.insert(params.messages, m) end
  table.insert(params.messages, { role = "user", content = question })
  local token = next_token("chat")
  params.partialResultToken = token
  stream_when_ready(bufnr, client.id, "moelsp/chat", params, token, function(text)
    table.insert(s.messages, { role = "user", content = question })
    table.insert(s.messages, { role = "assistant", content = text })
  end)
  return bufnr
end

-- The headings' labels. The questions themselves are the server's: it answers
-- moelsp.explain & co. with the turn it asked (`question`).
local titles = { explain = "Explain", fix = "Fix", document = "Document" }

--- :MoeExplain / :MoeFix / :MoeDocument on lines line1..line2 of `src`
--- (the whole buffer without a range).
function M.command(kind, opts)
  opts = opts or {}
  local src = opts.bufnr or api.nvim_get_current_buf()
  local client = client_for(src)
  if not client then return end
  local line1, line2 = opts.line1, opts.line2
  if not opts.range or opts.range == 0 then
    line1, line2 = 1, api.nvim_buf_line_count(src)
  end
  local range = line_range(src, line1, line2)
  local bufnr = new_buffer()
  local s = M.sessions[bufnr]
  s.client_id = client.id
  local name = vim.fn.fnamemodify(api.nvim_buf_get_name(src), ":~:.")
  append_lines(bufnr, {
    string.format("## %s: %s, lines %d-%d", titles[kind], name, line1, line2), "", "## moelsp", "", "",
  })
  local win = open_window(bufnr)
  pcall(api.nvim_win_set_cursor, win, { api.nvim_buf_line_count(bufnr), 0 })
  local token = next_token(kind)
  local method, params
  if clients.for_buffer(src) then
    method, params = "workspace/executeCommand", {
      command = "moelsp." .. kind,
      arguments = { { uri = vim.uri_from_bufnr(src), range = range } },
      workDoneToken = token,
    }
  else
    -- Not a document the server has (a scratch buffer, a help page): the
    -- same command through moelsp/chat, with the lines themselves.
    method, params = "moelsp/chat", {
      kind = kind,
      code = table.concat(api.nvim_buf_get_lines(src, line1 - 1, line2, false), "\n"),
      language = vim.bo[src].filetype,
      partialResultToken = token,
    }
  end
  stream_when_ready(bufnr, client.id, method, params, token, function(text, result)
    -- Follow-up questions with :MoeChat in this buffer see the code: the turn
    -- as the server asked it (its question and the code). A server that does
    -- not say (older than this plugin) leaves the answer out of the history.
    if type(result.question) ~= "string" then return end
    table.insert(s.messages, { role = "user", content = result.question })
    table.insert(s.messages, { role = "assistant", content = text })
  end)
  return bufnr
end

return M

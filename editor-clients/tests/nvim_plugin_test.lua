-- The Neovim plugin (editor-clients/nvim) against the real server on its
-- embedded default model, headless:
--   MOELSP_BINARY=build/cli/moelsp nvim --headless -u NONE \
--     -c "set rtp+=editor-clients/nvim" -c "luafile editor-clients/tests/nvim_plugin_test.lua"
-- Exits 0 when every check passes, 1 with a message on the first failure.
-- Keys go through nvim_feedkeys, so the plugin's autocmds and keymaps run as
-- they do for a person typing; the test itself runs as a coroutine resumed
-- from timers, leaving Neovim's main loop free to process the keys.
local binary = os.getenv("MOELSP_BINARY")
local api = vim.api
local uv = vim.uv or vim.loop
local t_start = uv.hrtime()

local function elapsed() return (uv.hrtime() - t_start) / 1e9 end
local function log(msg) io.stdout:write(string.format("[%5.1fs] %s\n", elapsed(), msg)) end

local finished = false
local function fail(msg)
  if finished then return end
  finished = true
  io.stderr:write("nvim plugin test FAILED: " .. tostring(msg) .. "\n")
  vim.cmd("cquit 1")
end

-- Never hang: fail at 120 s, and leave hard at 135 s should the loop be stuck.
local guard = uv.new_timer()
guard:start(120000, 0, vim.schedule_wrap(function() fail("global timeout (120 s)") end))
local hard = uv.new_timer()
hard:start(135000, 0, function()
  io.stderr:write("nvim plugin test FAILED: hard timeout\n")
  os.exit(1)
end)

local function check(cond, msg)
  if not cond then error(msg, 2) end
end

local co
local function resume()
  if finished then return end
  local ok, err = coroutine.resume(co)
  if not ok then fail(debug.traceback(co, err)) end
end
local function sleep(ms)
  vim.defer_fn(resume, ms)
  coroutine.yield()
end
local function wait_until(cond, timeout_ms, what)
  local t0 = uv.hrtime()
  while true do
    local ok, v = pcall(cond)
    if ok and v then return v end
    if (uv.hrtime() - t0) / 1e6 > timeout_ms then
      local b = api.nvim_get_current_buf()
      error(string.format("timed out waiting for %s (mode %s, cursor %s, buffer %d:\n%s)", what,
        api.nvim_get_mode().mode, vim.inspect(api.nvim_win_get_cursor(0)), b,
        table.concat(api.nvim_buf_get_lines(b, 0, 12, false), "\n")), 2)
    end
    sleep(20)
  end
end
local function keys(k)
  api.nvim_feedkeys(api.nvim_replace_termcodes(k, true, false, true), "m", false)
end

local function test()
  check(binary and binary ~= "", "MOELSP_BINARY must be set")
  check(vim.fn.executable(binary) == 1, "not executable: " .. binary)
  -- -u NONE loads no plugin/ files: source the plugin's as startup would.
  vim.cmd("runtime! plugin/moelsp.lua")
  check(vim.fn.exists(":MoeChat") == 2, "plugin/moelsp.lua did not define :MoeChat")
  -- A model cache with one model in it (step 12), and no hub to ask.
  local here = debug.getinfo(1, "S").source:sub(2)
  local default_model = vim.fn.fnamemodify(here, ":p:h:h:h") .. "/models/moelsp-default.gguf"
  local models_dir = vim.fn.tempname()
  vim.fn.mkdir(models_dir .. "/acme/Tiny-GGUF", "p")
  check(uv.fs_copyfile(default_model, models_dir .. "/acme/Tiny-GGUF/tiny-Q8_0.gguf"), "cannot copy " .. default_model)
  vim.env.MOELSP_MODELS_DIR = models_dir
  vim.env.HF_ENDPOINT = "http://127.0.0.1:9"
  local moelsp = require("moelsp")
  local completion = require("moelsp.completion")
  local clients = require("moelsp.client")
  moelsp.setup({
    cmd = { binary, "lsp" },
    debounce = 30,
    inline = "extmark", -- the plugin's own implementation, on every Neovim
    init_options = { chat = { maxTokens = 40 } },
  })

  -- A Python file in a project of its own (root: the .git marker).
  local dir = vim.fn.tempname()
  vim.fn.mkdir(dir .. "/.git", "p")
  local path = dir .. "/main.py"
  -- The cursor goes after the indentation of the last line: the default
  -- model continues the function there (a degenerate answer would be empty).
  local original = { "def main():", "    args = parse_args()", "    " }
  vim.fn.writefile(original, path)
  vim.cmd("edit " .. vim.fn.fnameescape(path))
  local buf = api.nvim_get_current_buf()
  vim.bo[buf].filetype = "python" -- -u NONE: no filetype detection

  local client = wait_until(function() return moelsp.client(buf) end, 10000, "the client to attach")
  check(clients.find_root(buf) == dir, "root should be the .git directory: " .. clients.find_root(buf))
  wait_until(function() return clients.state(client.id) == "ready" end, 60000, "the model to be ready")
  log("server ready, client " .. client.id)

  local function reset_buffer()
    keys("<Esc>")
    sleep(50)
    api.nvim_buf_set_lines(buf, 0, -1, false, original)
    api.nvim_win_set_cursor(0, { #original, 0 })
  end

  local function ghost()
    local marks = api.nvim_buf_get_extmarks(buf, completion.ns, 0, -1, { details = true })
    if #marks == 0 then return nil end
    local d = marks[1][4]
    local text = d.virt_text and d.virt_text[1] and d.virt_text[1][1]
    return { row = marks[1][2], col = marks[1][3], text = text, virt_lines = d.virt_lines, pos = d.virt_text_pos }
  end

  -- Enters insert mode at the end of the last line and waits for a settled
  -- suggestion (asking explicitly when typing brought none).
  local function suggestion()
    keys("A")
    local ok = pcall(wait_until, function()
      return ghost() and completion.is_idle(buf)
    end, 8000, "ghost text")
    if not ok then
      log("no automatic suggestion; asking explicitly")
      check(api.nvim_get_mode().mode:sub(1, 1) == "i", "not in insert mode")
      completion.trigger(buf)
      wait_until(function() return ghost() and completion.is_idle(buf) end, 20000, "ghost text (invoked)")
    end
    sleep(100) -- no further request replaces it
    wait_until(function() return ghost() and completion.is_idle(buf) end, 5000, "a settled suggestion")
    return ghost()
  end

  -- 1. Ghost text as you type, equal to the server's own answer.
  api.nvim_win_set_cursor(0, { #original, 0 })
  local g = suggestion()
  local row, col = #original - 1, #original[#original]
  check(g.row == row and g.col == col, string.format("ghost text at %d:%d, cursor at %d:%d", g.row, g.col, row, col))
  local res = vim.lsp.buf_request_sync(buf, "textDocument/inlineCompletion", {
    textDocument = { uri = vim.uri_from_bufnr(buf) },
    position = { line = row, character = col },
    context = { triggerKind = 2 },
  }, 20000)
  local server_text
  for _, r in pairs(res or {}) do
    if r.result and r.result.items and r.result.items[1] then server_text = r.result.items[1].insertText end
  end
  check(server_text and server_text ~= "", "the server gave no suggestion: " .. vim.inspect(res))
  local server_lines = vim.split(server_text, "\n", { plain = true })
  check(g.text == server_lines[1], string.format("ghost text %q ~= server's first line %q", tostring(g.text), server_lines[1]))
  check(#server_lines == 1 or (g.virt_lines and #g.virt_lines == #server_lines - 1),
    "the suggestion's other lines should be virt_lines")
  log(string.format("ghost text (%s): %q (+%d lines)", tostring(g.pos), g.text, #server_lines - 1))

  -- 2. <Tab> accepts it all.
  keys("<Tab>")
  wait_until(function()
    return api.nvim_buf_get_lines(buf, row, row + 1, false)[1] == original[#original] .. server_lines[1]
  end, 5000, "the accepted text in the buffer")
  local after = api.nvim_buf_get_lines(buf, row, -1, false)
  check(#after >= #server_lines, "the accepted suggestion's lines are missing")
  for i = 2, #server_lines do
    check(after[i] == server_lines[i], string.format("accepted line %d: %q ~= %q", i, after[i], server_lines[i]))
  end
  local cur = api.nvim_win_get_cursor(0)
  check(cur[1] == row + #server_lines, "the cursor should follow the accepted text")
  log("accepted with <Tab>")

  -- 3. <M-w> accepts one word; the rest stays shown.
  reset_buffer()
  g = suggestion()
  local full = completion.current(buf).text
  local word = full:match("^[ \t]*\n?[ \t]*[%w_]+") or full:match("^[ \t]*\n?[ \t]*[^%w_%s]+")
  check(word and #word < #full, "the suggestion has more than a word: " .. full)
  keys("<M-w>")
  local expect = original[#original] .. word
  wait_until(function() return api.nvim_buf_get_lines(buf, row, row + 1, false)[1] == expect end, 5000,
    "one accepted word " .. vim.inspect(expect))
  check(api.nvim_buf_line_count(buf) == #original, "accept-word inserted more than a word")
  g = ghost()
  check(g and g.text == vim.split(full:sub(#word + 1), "\n", { plain = true })[1], "the rest of the suggestion should stay shown")
  log(string.format("accepted one word %q, rest shown: %q", word, g.text))

  -- 4. <C-]> dismisses.
  keys("<C-]>")
  wait_until(function() return ghost() == nil end, 3000, "the ghost text to go")
  sleep(300)
  check(ghost() == nil, "the dismissed suggestion came back")
  check(api.nvim_get_mode().mode:sub(1, 1) == "i", "dismiss left insert mode")
  log("dismissed with <C-]>")

  -- 5. Leaving insert mode dismisses too; <Tab> without a suggestion is a tab.
  keys("<Esc>")
  wait_until(function() return api.nvim_get_mode().mode == "n" end, 3000, "normal mode")
  check(ghost() == nil, "ghost text left after <Esc>")
  completion.set_enabled(false)
  reset_buffer()
  vim.bo[buf].expandtab = true
  vim.bo[buf].shiftwidth = 4
  vim.bo[buf].softtabstop = 4
  keys("A<Tab>")
  wait_until(function() return api.nvim_buf_get_lines(buf, row, row + 1, false)[1] == "        " end, 3000,
    "<Tab> to insert indentation when nothing is suggested")
  completion.set_enabled(true)
  reset_buffer()
  log("<Tab> falls back to a tab")

  -- 6. :MoeChat streams into a scratch buffer.
  vim.cmd("MoeChat Write a Python function that adds two numbers.")
  local chat = api.nvim_get_current_buf()
  check(vim.b[chat].moelsp_chat, ":MoeChat did not open its buffer")
  local seen = {}
  wait_until(function()
    seen[#api.nvim_buf_get_lines(chat, 0, -1, false) .. ":" .. table.concat(api.nvim_buf_get_lines(chat, -2, -1, false))] = true
    return vim.b[chat].moelsp_chat_done == 1
  end, 60000, "the chat answer")
  local updates = vim.b[chat].moelsp_chat_updates
  local answer = vim.b[chat].moelsp_chat_result
  local text = table.concat(api.nvim_buf_get_lines(chat, 0, -1, false), "\n")
  check(updates and updates > 1, "the answer did not stream (updates: " .. tostring(updates) .. ")")
  check(type(answer) == "string" and answer ~= "", "empty chat answer")
  check(text:find(answer, 1, true), "the chat buffer lacks the final answer")
  check(text:find("Write a Python function", 1, true), "the chat buffer lacks the question")
  log(string.format(":MoeChat streamed %d updates, %d characters", updates, #answer))
  vim.cmd("close")

  -- 7. :MoeExplain on a range.
  api.nvim_set_current_buf(buf)
  vim.cmd("1,2MoeExplain")
  local explain = api.nvim_get_current_buf()
  wait_until(function() return vim.b[explain].moelsp_chat_done == 1 end, 60000, "the explanation")
  check((vim.b[explain].moelsp_chat_result or "") ~= "", "empty explanation")
  check(api.nvim_buf_get_lines(explain, 0, 1, false)[1]:find("lines 1%-2"), "the explanation's title")
  -- A follow-up :MoeChat goes on from the turn as the server asked it (its
  -- question, then the code), not from a question of the plugin's own.
  local history = require("moelsp.chat").sessions[explain].messages
  check(#history == 2 and history[1].role == "user" and history[2].content == vim.b[explain].moelsp_chat_result,
    "the explanation's history: " .. vim.inspect(history))
  check(history[1].content:find("^%S.*\n\n```python\ndef main%(%):\n    args = parse_args%(%)\n```$"),
    "the server's question in the history: " .. vim.inspect(history[1].content))
  log(":MoeExplain answered")
  vim.cmd("close")
  -- On a buffer the server does not have (a scratch buffer): the same
  -- command through moelsp/chat with the lines themselves.
  local scratch = api.nvim_create_buf(true, true)
  api.nvim_buf_set_lines(scratch, 0, -1, false, { "def twice(x):", "    return 2 * x" })
  vim.bo[scratch].filetype = "python"
  api.nvim_set_current_buf(scratch)
  vim.cmd("MoeDocument")
  local documented = api.nvim_get_current_buf()
  wait_until(function() return vim.b[documented].moelsp_chat_done == 1 end, 60000, "the scratch buffer's documentation")
  local dh = require("moelsp.chat").sessions[documented].messages
  check(#dh == 2 and dh[1].content:find("\n\n```python\ndef twice%(x%):\n    return 2 %* x\n```$"),
    "the scratch buffer's question: " .. vim.inspect(dh))
  log(":MoeDocument answered on a buffer the server does not have")
  vim.cmd("close")

  -- 8. :MoeStatus.
  api.nvim_set_current_buf(buf)
  local before = api.nvim_get_current_buf()
  vim.cmd("MoeStatus")
  local status = wait_until(function()
    local b = api.nvim_get_current_buf()
    return b ~= before and vim.b[b].moelsp_status and b
  end, 10000, "the status window")
  local st = table.concat(api.nvim_buf_get_lines(status, 0, -1, false), "\n")
  -- The server's words (its summary) under the root, then this editor's.
  check(st:find("^# moelsp  " .. vim.pesc(dir) .. "\n"), ":MoeStatus lacks the root:\n" .. st)
  check(st:find("state:%s+ready"), ":MoeStatus does not say ready:\n" .. st)
  check(st:find("model:"), ":MoeStatus lacks the model")
  check(st:find("completions:%s+%d+ requests, [1-9]%d* shown, [1-9]%d* accepted"), ":MoeStatus lacks the telemetry:\n" .. st)
  check(st:find("per answer: %d+ ms = queue %d+ %+ prompt %d+"), ":MoeStatus lacks where the time went:\n" .. st)
  check(st:find("controls:%s+trigger automatic, snoozed no"), ":MoeStatus lacks the server's controls:\n" .. st)
  check(st:find("## this editor\nclient:%s+id " .. client.id .. ", inline completions on"),
    ":MoeStatus lacks the client:\n" .. st)
  log(":MoeStatus says ready")
  vim.cmd("close")

  -- 9. :MoeToggle.
  local was = completion.enabled
  vim.cmd("MoeToggle")
  check(completion.enabled == not was, ":MoeToggle did not toggle")
  vim.cmd("MoeToggle")
  check(completion.enabled == was, ":MoeToggle did not toggle back")

  -- 9b. The server's controls: :MoeSnooze, :MoeResume, :MoeManual. Typing
  -- while snoozed asks the model nothing (its request count stays).
  local function server_status()
    local r = require("moelsp.util").request_sync(client, "moelsp/status", {}, 5000, buf)
    return r and r.result or {}
  end
  local function snooze_left()
    local st = clients.status[client.id]
    return st and st.completions and tonumber(st.completions.snoozeLeftMs) or 0
  end
  vim.cmd("MoeSnooze 1")
  wait_until(function() return snooze_left() > 0 end, 5000, "the snooze in the status")
  check(moelsp.statusline(buf):find("snoozed 1 min", 1, true), "statusline: " .. moelsp.statusline(buf))
  local before = server_status().completions.requests
  reset_buffer()
  keys("Areturn args")
  sleep(800)
  check(server_status().completions.requests == before, "a request reached the model while snoozed")
  check(not ghost(), "ghost text while snoozed")
  keys("<Esc>")
  vim.cmd("MoeResume")
  wait_until(function() return snooze_left() == 0 end, 5000, "the snooze to end")
  reset_buffer()
  keys("Areturn args") -- the same typing, now heard
  wait_until(function() return server_status().completions.requests > before end, 5000, "a request after resuming")
  keys("<Esc>")
  vim.cmd("MoeManual on")
  wait_until(function() return server_status().completions.trigger == "manual" end, 5000, "manual mode")
  vim.cmd("MoeManual off")
  wait_until(function() return server_status().completions.trigger == "automatic" end, 5000, "automatic mode")
  reset_buffer()
  local rules = require("moelsp.config").language_rules({ ["*"] = true, markdown = false, gitcommit = false, python = true })
  check(rules == "*,!gitcommit,!markdown,python", "language rules: " .. rules)
  log(":MoeSnooze, :MoeResume and :MoeManual reach the server")

  -- 9c. The buffer's other language server (a test double of pyright & co:
  -- fake_definition_server.py) resolves the names near the cursor; the
  -- plugin sends the locations to moelsp (moelsp/didResolveDefinitions).
  vim.fn.writefile({ "def parse_args():", "    # the command line (lib marker)", "    return []" }, dir .. "/lib.py")
  local here = debug.getinfo(1, "S").source:sub(2):match("(.*)/") or "."
  local fake = vim.lsp.start_client({ name = "fake-definitions", root_dir = dir,
    cmd = { "python3", here .. "/fake_definition_server.py", dir } })
  check(fake, "the fake definition server did not start")
  vim.lsp.buf_attach_client(buf, fake)
  wait_until(function()
    local c = vim.lsp.get_client_by_id(fake)
    return c and ((c.server_capabilities or {}).definitionProvider or (c.resolved_capabilities or {}).goto_definition)
  end, 10000, "the fake server's capabilities")
  local near = require("moelsp.definitions").names_near(buf, 2, 4)
  check(near[1] and near[1].name == "parse_args" and near[1].row == 1, "names near the cursor: " .. vim.inspect(near))
  keys("Areturn ")
  wait_until(function()
    local ed = (server_status().index or {}).editorDefinitions or {}
    return (ed.received or 0) >= 1
  end, 10000, "the other server's definition at moelsp")
  keys("<Esc>")
  vim.lsp.stop_client(fake)
  reset_buffer()
  log("the other server's definition of parse_args reached moelsp")

  -- 9d. A split with lib.py: the lines it shows go to moelsp (moelsp/didChangeVisibleRanges).
  vim.cmd("split " .. vim.fn.fnameescape(dir .. "/lib.py"))
  local lib = api.nvim_get_current_buf()
  vim.bo[lib].filetype = "python"
  wait_until(function() return moelsp.client(lib) end, 10000, "moelsp attached to lib.py")
  vim.cmd("wincmd p")
  wait_until(function() return ((server_status().index or {}).viewedRanges or 0) >= 1 end, 10000,
    "the split's visible lines at moelsp")
  vim.cmd("wincmd p")
  vim.cmd("close")
  check(api.nvim_get_current_buf() == buf, "back in the test buffer")
  log("the split's visible lines reached moelsp")

  -- 10. :checkhealth moelsp.
  vim.cmd("checkhealth moelsp")
  local health = table.concat(api.nvim_buf_get_lines(0, 0, -1, false), "\n")
  check(not health:find("Failed to run healthcheck", 1, true), "checkhealth failed:\n" .. health)
  check(not health:find("No healthcheck found", 1, true), "no healthcheck found:\n" .. health)
  check(not health:find("ERROR", 1, true), "checkhealth reports an error:\n" .. health)
  check(health:find("moelsp 0", 1, true), "checkhealth lacks the binary's version:\n" .. health)
  check(health:find("ready", 1, true), "checkhealth lacks the server state:\n" .. health)
  check(health:find("; completions: %d+ asked"), "checkhealth lacks the server's status line:\n" .. health)
  log(":checkhealth moelsp ran")

  -- 11. Neovim 0.12+: its own vim.lsp.inline_completion draws and accepts,
  -- the plugin's keys add accept-word.
  if vim.lsp.inline_completion and vim.fn.has("nvim-0.12") == 1 then
    vim.cmd("silent! tabonly")
    api.nvim_set_current_buf(buf)
    require("moelsp.config").get().inline = "auto"
    check(completion.use_builtin(), "inline = 'auto' should use vim.lsp.inline_completion on 0.12+")
    completion.set_enabled(true)
    reset_buffer()
    keys("A")
    local function builtin_ghost()
      local ns = api.nvim_get_namespaces()["nvim.lsp.inline_completion"]
      local marks = ns and api.nvim_buf_get_extmarks(buf, ns, 0, -1, { details = true }) or {}
      return marks[1] and marks[1][4].virt_text and marks[1][4].virt_text[1][1]
    end
    local first = wait_until(builtin_ghost, 15000, "vim.lsp.inline_completion's ghost text")
    local w = first:match("^[ \t]*[%w_]+") or first:match("^[ \t]*[^%w_%s]+")
    keys("<M-w>")
    wait_until(function() return api.nvim_buf_get_lines(buf, row, row + 1, false)[1] == original[#original] .. w end,
      5000, "the word accepted from vim.lsp.inline_completion")
    wait_until(builtin_ghost, 15000, "vim.lsp.inline_completion's ghost text after a word")
    keys("<Tab>")
    wait_until(function() return #api.nvim_buf_get_lines(buf, row, row + 1, false)[1] > #original[#original] + #w end,
      5000, "<Tab> to accept vim.lsp.inline_completion's suggestion")
    log(string.format("vim.lsp.inline_completion: accepted a word %q and the rest", w))
  else
    log("vim.lsp.inline_completion: skipped (Neovim < 0.12)")
  end

  -- 12. :MoeModel: the server's list (the cache; the guide cannot reach a
  -- hub here) in vim.ui.select; the cached model picked loads in place.
  local offered
  local real_select = vim.ui.select
  vim.ui.select = function(items, _, on_choice)
    offered = items
    for _, it in ipairs(items) do
      if it.value:find("tiny%-Q8_0%.gguf$") then return on_choice(it) end
    end
    on_choice(nil)
  end
  vim.cmd("MoeModel")
  wait_until(function() return offered end, 30000, ":MoeModel's choices")
  vim.ui.select = real_select
  check(offered[1].value == "" and offered[1].label:find("embedded"), "the first choice: " .. vim.inspect(offered[1]))
  check(offered[2].label:find("acme/Tiny%-GGUF/tiny%-Q8_0%.gguf"), "the cached model: " .. vim.inspect(offered))
  wait_until(function()
    local st = clients.status[client.id]
    return st and st.state == "ready" and (st.message or ""):find("tiny%-Q8_0%.gguf")
  end, 60000, "the picked model loaded")
  check(require("moelsp.config").get().init_options.model:find("tiny%-Q8_0%.gguf$"), "the choice is not kept")
  log(string.format(":MoeModel offered %d choices; the cached model picked was loaded", #offered))

  finished = true
  io.stdout:write("nvim plugin test passed\n")
  vim.cmd("qall!")
end

co = coroutine.create(test)
vim.schedule(resume)

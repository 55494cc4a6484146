-- moelsp driven by Neovim's built-in LSP client (Debian's 0.7.x), headless:
--   nvim --headless -u NONE -c "luafile nvim_client.lua"
-- with MOELSP_BINARY and MOELSP_TEST_DATA in the environment. Exits 0 on
-- success, 1 with a message on the first failed check.
local binary = os.getenv("MOELSP_BINARY")
local data = os.getenv("MOELSP_TEST_DATA")

local function fail(msg)
  io.stderr:write("nvim client test FAILED: " .. msg .. "\n")
  vim.cmd("cquit 1")
end
local function check(cond, msg)
  if not cond then fail(msg) end
end

check(binary and data, "MOELSP_BINARY and MOELSP_TEST_DATA must be set")
local ready = false
local ready_status -- the first moelsp/status that said ready
local client_id = vim.lsp.start_client({
  name = "moelsp",
  cmd = { binary, "lsp" },
  root_dir = "/tmp",
  init_options = {
    model = data .. "/reference/qwen3moe-ref.gguf",
    threads = 2,
    contextSize = 1024,
    completion = { maxTokens = 8, timeBudgetMs = 5000 },
    chat = { maxTokens = 12, template = "chatml" },
  },
  handlers = {
    ["moelsp/status"] = function(_, result)
      if result.state == "ready" then
        ready = true
        ready_status = ready_status or result
      end
      if result.state == "error" then fail("model failed to load: " .. tostring(result.message)) end
    end,
  },
})
check(client_id, "start_client failed")
check(vim.wait(20000, function() return ready end, 20), "model not ready within 20 s")
local client = vim.lsp.get_client_by_id(client_id)
check(client and client.initialized, "client not initialized")
check(client.server_capabilities.completionProvider ~= nil, "no completionProvider")

-- open a Python buffer and attach (sends didOpen)
local buf = vim.api.nvim_create_buf(true, false)
vim.api.nvim_buf_set_name(buf, "/tmp/moelsp_nvim_test.py")
vim.api.nvim_buf_set_lines(buf, 0, -1, false, { "def area(w, h):", "    return " })
vim.bo[buf].filetype = "python"
vim.lsp.buf_attach_client(buf, client_id)
vim.wait(200)

local pos = { textDocument = { uri = vim.uri_from_bufnr(buf) }, position = { line = 1, character = 11 } }
local res, err = client.request_sync("textDocument/completion", pos, 20000, buf)
check(res and not res.err, "completion failed: " .. vim.inspect(err or (res and res.err)))
check(type(res.result.items) == "table", "completion: no items list")
for _, item in ipairs(res.result.items) do
  check(type(item.label) == "string" and #item.label > 0, "completion item without a label")
end

local inline = vim.tbl_extend("force", pos, { context = { triggerKind = 1 } })
res, err = client.request_sync("textDocument/inlineCompletion", inline, 20000, buf)
check(res and not res.err, "inlineCompletion failed: " .. vim.inspect(err or (res and res.err)))
check(type(res.result.items) == "table", "inlineCompletion: no items list")
check(#res.result.items <= 3, "inlineCompletion: too many items")
for _, item in ipairs(res.result.items) do
  check(type(item.insertText) == "string" and #item.insertText > 0, "inline item without text")
end

res, err = client.request_sync("workspace/executeCommand", {
  command = "moelsp.chat",
  arguments = { { messages = { { role = "user", content = "Say hello in Python." } } } },
}, 20000, buf)
check(res and not res.err, "chat failed: " .. vim.inspect(err or (res and res.err)))
check(type(res.result.text) == "string" and #res.result.text > 0, "chat: empty answer")

-- The server renders its status for the editors to show as is.
check(type(ready_status.summary) == "string" and ready_status.summary:find("^state:%s+ready"),
  "status: no summary: " .. vim.inspect(ready_status.summary))
check(type(ready_status.summaryLine) == "string" and ready_status.summaryLine:find("^moelsp ready"),
  "status: no summaryLine: " .. vim.inspect(ready_status.summaryLine))

-- moelsp.explain answers with the turn it asked: its question and the code.
res, err = client.request_sync("workspace/executeCommand", {
  command = "moelsp.explain",
  arguments = { { uri = vim.uri_from_bufnr(buf),
    range = { start = { line = 0, character = 0 }, ["end"] = { line = 0, character = 15 } } } },
}, 20000, buf)
check(res and not res.err, "explain failed: " .. vim.inspect(err or (res and res.err)))
check(type(res.result.text) == "string", "explain: no answer")
check(type(res.result.question) == "string" and res.result.question:find("^%S.*\n\n```python\ndef area%(w, h%):\n```$"),
  "explain: the question asked: " .. vim.inspect(res.result.question))

client.stop()
check(vim.wait(10000, function() return client.is_stopped() end, 20), "client did not stop")
io.stdout:write("nvim client test passed\n")
vim.cmd("qall!")

-- Small compatibility layer: Neovim 0.7 .. current. Every API whose shape
-- changed between releases is reached through here.
local M = {}

M.uv = vim.uv or vim.loop

local has_cache = {}
--- vim.fn.has('nvim-X.Y') as a boolean, cached.
function M.has(feature)
  local v = has_cache[feature]
  if v == nil then
    v = vim.fn.has(feature) == 1
    has_cache[feature] = v
  end
  return v
end

-- Client methods became `client:method()` in 0.11 (the dot form is deprecated there).
local colon = M.has("nvim-0.11")

function M.request(client, method, params, handler, bufnr)
  if colon then return client:request(method, params, handler, bufnr) end
  return client.request(method, params, handler, bufnr)
end

function M.request_sync(client, method, params, timeout_ms, bufnr)
  if colon then return client:request_sync(method, params, timeout_ms, bufnr) end
  return client.request_sync(method, params, timeout_ms, bufnr)
end

function M.notify(client, method, params)
  if colon then return client:notify(method, params) end
  return client.notify(method, params)
end

function M.cancel(client, id)
  if colon then return client:cancel_request(id) end
  return client.cancel_request(id)
end

function M.is_stopped(client)
  if colon then return client:is_stopped() end
  return client.is_stopped()
end

function M.stop(client, force)
  if colon then return client:stop(force) end
  return client.stop(force)
end

--- The live client with this id, or nil.
function M.get_client(id)
  if not id then return nil end
  local c = vim.lsp.get_client_by_id(id)
  if c and not M.is_stopped(c) then return c end
  return nil
end

--- UTF-16 code units of `line` up to byte offset `byte` (0-based, clamped).
function M.utf16_col(line, byte)
  byte = math.max(0, math.min(byte, #line))
  if M.has("nvim-0.11") then return vim.str_utfindex(line, "utf-16", byte, false) end
  local ok, _, u16 = pcall(vim.str_utfindex, line, byte)
  if ok and u16 then return u16 end
  return byte
end

--- Byte offset in `line` of UTF-16 column `col` (clamped to the line).
function M.byte_col(line, col)
  if col <= 0 then return 0 end
  local ok, b
  if M.has("nvim-0.11") then
    ok, b = pcall(vim.str_byteindex, line, "utf-16", col, false)
  else
    ok, b = pcall(vim.str_byteindex, line, col, true)
  end
  if ok and b then return math.min(b, #line) end
  return #line
end

--- LSP position (UTF-16) of a 0-based row and byte column in `bufnr`.
function M.position(bufnr, row, byte)
  local line = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ""
  return { line = row, character = M.utf16_col(line, byte) }
end

--- Byte column in `bufnr` of an LSP position.
function M.byte_of(bufnr, pos)
  local line = vim.api.nvim_buf_get_lines(bufnr, pos.line, pos.line + 1, false)[1] or ""
  return M.byte_col(line, pos.character)
end

function M.split_lines(text)
  return vim.split(text, "\n", { plain = true })
end

--- Messages from the plugin, prefixed.
function M.info(msg)
  vim.notify("moelsp: " .. msg, vim.log.levels.INFO)
end
function M.warn(msg)
  vim.notify("moelsp: " .. msg, vim.log.levels.WARN)
end
function M.error(msg)
  vim.notify("moelsp: " .. msg, vim.log.levels.ERROR)
end

--- Fire `User <pattern>` without the "No matching autocommands" message.
function M.user_event(pattern, data)
  if M.has("nvim-0.8") then
    pcall(vim.api.nvim_exec_autocmds, "User", { pattern = pattern, modeline = false, data = data })
  else
    pcall(vim.api.nvim_exec_autocmds, "User", { pattern = pattern, modeline = false })
  end
end

--- The LSP log file (the server's stderr lands there).
function M.log_path()
  local ok, log = pcall(require, "vim.lsp.log")
  if ok and type(log.get_filename) == "function" then return log.get_filename() end
  return vim.lsp.get_log_path()
end

function M.in_insert_mode()
  local mode = vim.api.nvim_get_mode().mode
  return mode:sub(1, 1) == "i"
end

--- Replace tabs by spaces for display in virtual text (0.7 shows them as ^I).
function M.expand_tabs(s, tabstop)
  if not s:find("\t", 1, true) then return s end
  return (s:gsub("\t", string.rep(" ", tabstop > 0 and tabstop or 8)))
end

return M

-- Context from the editor for moelsp's completions (our protocol extension,
-- see the server's lsp/handlers_editor_context.cpp): definitions from the
-- buffer's other language servers (moelsp/didResolveDefinitions), and the
-- lines the windows show (moelsp/didChangeVisibleRanges, at the end).
--
-- Definitions: When typing pauses, the names on
-- the cursor's line and the three above it are looked up with
-- textDocument/definition on the other clients attached to the buffer
-- (pyright, clangd, rust-analyzer…), and the locations go to the moelsp
-- server, which reads the definitions' first lines into the next
-- completions' prompts. Only when the set of names changes; at most 12
-- names; each lookup bounded in time.
local util = require("moelsp.util")
local api = vim.api

local M = {}

local MAX_NAMES, LOOKUP_MS, PAUSE_MS = 12, 1500, 300
local KEYWORDS = {}
for w in ([[and as assert async await break case catch class const continue def del elif else except export
  extends false finally for from function if import in interface is lambda let local new nil none not null or pass
  raise return self static struct super switch then this throw true try type typeof var void while with yield
  None True False end]]):gmatch("%S+") do KEYWORDS[w] = true end

local state = {} -- bufnr -> { timer, sent = names key }

--- Whole names before the cursor (not the word being typed), nearest first:
--- { name, row (0-based), col (byte, 0-based) }.
function M.names_near(bufnr, row, col)
  local out, seen = {}, {}
  local first = math.max(0, row - 3)
  local lines = api.nvim_buf_get_lines(bufnr, first, row + 1, false)
  for r = row, first, -1 do
    local text = lines[r - first + 1] or ""
    if r == row then text = text:sub(1, col):gsub("[%w_]+$", "") end
    local found = {}
    for s, name in text:gmatch("()([%a_][%w_]*)") do
      if #name >= 3 and not KEYWORDS[name] and not seen[name] then
        seen[name] = true
        table.insert(found, { name = name, row = r, col = s }) -- s - 1 + 1: inside the name
      end
    end
    for i = #found, 1, -1 do
      if #out < MAX_NAMES then table.insert(out, found[i]) end
    end
  end
  return out
end

local function supports_definition(c)
  local caps = c.server_capabilities or {}
  if caps.definitionProvider then return true end
  local rc = c.resolved_capabilities -- Neovim 0.7
  return rc ~= nil and rc.goto_definition == true
end

-- The other clients of the buffer that answer textDocument/definition.
local function others(bufnr, moelsp_id)
  local out = {}
  local list = vim.lsp.get_clients and vim.lsp.get_clients({ bufnr = bufnr })
    or vim.lsp.buf_get_clients(bufnr)
  for _, c in pairs(list or {}) do
    if c.id ~= moelsp_id and c.name ~= "moelsp" and supports_definition(c) then table.insert(out, c) end
  end
  return out
end

-- A position in the client's own encoding (clangd and rust-analyzer take
-- utf-8; the protocol's default is utf-16).
local function position_for(client, bufnr, row, byte)
  local enc = client.offset_encoding or "utf-16"
  if enc == "utf-8" then return { line = row, character = byte } end
  if enc == "utf-32" then
    local line = api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ""
    return { line = row, character = (vim.str_utfindex(line, byte)) }
  end
  return util.position(bufnr, row, byte)
end

local function first_location(result)
  if type(result) ~= "table" then return nil end
  local l = (result.uri or result.targetUri) and result or result[1] -- one Location, or a list
  if type(l) ~= "table" then return nil end
  local uri = l.targetUri or l.uri
  local range = l.targetSelectionRange or l.targetRange or l.range
  if not uri or not range then return nil end
  return uri, range
end

function M.resolve(bufnr, moelsp_id)
  local moelsp = util.get_client(moelsp_id)
  if not moelsp or not api.nvim_buf_is_valid(bufnr) then return end
  local st = state[bufnr] or {}
  state[bufnr] = st
  local servers = others(bufnr, moelsp_id)
  if #servers == 0 then return end
  local pos = api.nvim_win_get_cursor(0)
  local names = M.names_near(bufnr, pos[1] - 1, pos[2])
  local keys = {}
  for _, n in ipairs(names) do table.insert(keys, n.name) end
  local key = table.concat(keys, ",")
  if st.sent == key or #names == 0 then return end
  local uri = vim.uri_from_bufnr(bufnr)
  local found, left, done = {}, #names, false
  local function finish()
    if done then return end
    done = true
    local defs = {}
    for _, n in ipairs(names) do
      if found[n.name] then table.insert(defs, found[n.name]) end
    end
    -- Nothing found is not remembered: a server still starting answers empty
    -- (and the server's set is empty now, whatever was sent before).
    st.sent = #defs > 0 and key or nil
    if util.get_client(moelsp_id) and not util.is_stopped(moelsp) then
      util.notify(moelsp, "moelsp/didResolveDefinitions", { textDocument = { uri = uri }, definitions = defs })
    end
  end
  vim.defer_fn(finish, LOOKUP_MS)
  local server = servers[1] -- the first other client that offers definitions
  for _, n in ipairs(names) do
    local params = { textDocument = { uri = uri }, position = position_for(server, bufnr, n.row, n.col) }
    util.request(server, "textDocument/definition", params, function(err, result)
      if not err then
        local l_uri, range = first_location(result)
        local own = l_uri == uri and range.start.line == n.row
        if l_uri and not own then found[n.name] = { name = n.name, location = { uri = l_uri, range = range } } end
      end
      left = left - 1
      if left == 0 then vim.schedule(finish) end
    end, bufnr)
  end
end

--- After an edit in insert mode: resolve once typing pauses.
function M.schedule(bufnr, moelsp_id)
  local st = state[bufnr]
  if not st then
    st = { timer = util.uv.new_timer() }
    state[bufnr] = st
  end
  st.timer:stop()
  st.timer:start(PAUSE_MS, 0, vim.schedule_wrap(function()
    if not state[bufnr] or api.nvim_get_current_buf() ~= bufnr then return end
    local ok, err = pcall(M.resolve, bufnr, moelsp_id)
    if not ok and not M.warned then -- once: a broken lookup must not nag on every pause
      M.warned = true
      util.warn("looking up definitions for the context failed: " .. tostring(err))
    end
  end))
end

function M.detach(bufnr)
  local st = state[bufnr]
  if not st then return end
  if st.timer then
    st.timer:stop()
    if not st.timer:is_closing() then st.timer:close() end
  end
  state[bufnr] = nil
end

-- The lines each window of the current tab shows (moelsp/didChangeVisibleRanges),
-- once scrolling settles: the server adds what another window shows (a split
-- with the file being called into) to the completions' context.
local view_timer
local view_sent = {} -- bufnr -> "first-last" last sent

function M.send_views()
  local clients = require("moelsp.client")
  for _, win in ipairs(api.nvim_tabpage_list_wins(0)) do
    local b = api.nvim_win_get_buf(win)
    local c = clients.for_buffer(b)
    if c then
      local first, last = vim.fn.line("w0", win) - 1, vim.fn.line("w$", win) - 1
      local key = first .. "-" .. last
      if view_sent[b] ~= key then
        view_sent[b] = key
        util.notify(c, "moelsp/didChangeVisibleRanges", {
          textDocument = { uri = vim.uri_from_bufnr(b) },
          ranges = { { start = { line = first, character = 0 }, ["end"] = { line = last, character = 0 } } },
        })
      end
    end
  end
end

function M.schedule_views()
  view_timer = view_timer or util.uv.new_timer()
  view_timer:stop()
  view_timer:start(PAUSE_MS, 0, vim.schedule_wrap(function() pcall(M.send_views) end))
end

return M

-- :MoeStatus: the server's moelsp/status (state, model, plan, tokens/s,
-- completion telemetry), as the server words it, in a float or a split.
local util = require("moelsp.util")
local config = require("moelsp.config")
local clients = require("moelsp.client")

local api = vim.api
local M = {}

-- The server renders its status (`summary`: lines of text), so that every
-- editor shows the same words: this file only adds what the server cannot
-- know (the workspace root, this Neovim's client and its settings) around it.

-- The server's lines for status `st`, or a minimal text when it has none (the
-- client's own status of a server that stopped or never answered).
local function server_lines(st)
  if type(st.summary) == "string" and st.summary ~= "" then
    return util.split_lines((st.summary:gsub("\n+$", "")))
  end
  local lines = { string.format("state:        %s%s", tostring(st.state or "?"),
    type(st.message) == "string" and st.message ~= "" and ("  (" .. st.message .. ")") or "") }
  if st.model then table.insert(lines, "model:        " .. tostring(st.model)) end
  return lines
end

--- Lines describing one server's status `st` (a moelsp/status result): the
--- server's `summary` under a heading with the root and `note` (e.g. why it is
--- an older status), then this editor's side of it when `client` is given.
function M.format(st, root, client, note)
  local lines = { "# moelsp" .. (root and ("  " .. root) or ""), "" }
  if note then vim.list_extend(lines, { "(" .. note .. ")", "" }) end
  vim.list_extend(lines, server_lines(st))
  if client then
    local comp = require("moelsp.completion")
    vim.list_extend(lines, { "", "## this editor" })
    table.insert(lines, string.format("client:       id %d, inline completions %s (%s, debounce %s ms)", client.id,
      comp.enabled and "on" or "off", comp.use_builtin() and "vim.lsp.inline_completion" or "extmark ghost text",
      config.get().debounce or 0))
  end
  return lines
end

local function show(lines)
  local flat = {}
  for _, l in ipairs(lines) do vim.list_extend(flat, util.split_lines(l)) end
  lines = flat
  local bufnr = api.nvim_create_buf(false, true)
  api.nvim_buf_set_lines(bufnr, 0, -1, false, lines)
  vim.bo[bufnr].modifiable = false
  vim.bo[bufnr].bufhidden = "wipe"
  vim.bo[bufnr].filetype = "markdown"
  vim.b[bufnr].moelsp_status = true
  if config.get().status_window == "float" then
    local width = 20
    for _, l in ipairs(lines) do width = math.max(width, vim.fn.strdisplaywidth(l)) end
    width = math.min(width + 2, math.max(20, vim.o.columns - 4))
    local height = math.min(#lines, math.max(3, vim.o.lines - 6))
    local win = api.nvim_open_win(bufnr, true, {
      relative = "editor",
      width = width,
      height = height,
      row = math.max(0, math.floor((vim.o.lines - height) / 2) - 1),
      col = math.max(0, math.floor((vim.o.columns - width) / 2)),
      style = "minimal",
      border = "rounded",
    })
    vim.wo[win].wrap = true
  else
    vim.cmd("botright split")
    api.nvim_win_set_buf(0, bufnr)
  end
  for _, key in ipairs({ "q", "<Esc>" }) do
    vim.keymap.set("n", key, "<Cmd>close<CR>", { buffer = bufnr, nowait = true })
  end
  return bufnr
end

--- Shows the status of the servers (the buffer's first). Returns nothing: the
--- window opens when the server answers.
function M.show()
  local all = clients.all()
  local mine = clients.for_buffer(0)
  if #all == 0 then
    local lines = { "# moelsp", "", "state:        not running" }
    local bin, why = clients.binary()
    table.insert(lines, "binary:       " .. (bin or why))
    if not config.options then
      table.insert(lines, "setup:        require('moelsp').setup{} was not called")
    else
      table.insert(lines, "filetypes:    " .. table.concat(config.get().filetypes, " "))
    end
    for _, l in ipairs(clients.log) do table.insert(lines, "log: " .. l) end
    return show(lines)
  end
  table.sort(all, function(a, b)
    if mine and a.client.id == mine.id then return true end
    if mine and b.client.id == mine.id then return false end
    return a.root < b.root
  end)
  local pending = #all
  local sections = {}
  local function done()
    pending = pending - 1
    if pending > 0 then return end
    local lines = {}
    for i = 1, #all do
      if i > 1 then table.insert(lines, "") end
      vim.list_extend(lines, sections[i])
    end
    if #clients.log > 0 then
      table.insert(lines, "")
      table.insert(lines, "## recent server messages")
      for i = math.max(1, #clients.log - 5), #clients.log do table.insert(lines, "- " .. clients.log[i]) end
    end
    show(lines)
  end
  for i, entry in ipairs(all) do
    local ok = util.request(entry.client, "moelsp/status", {}, function(err, result)
      if not err and type(result) == "table" then
        sections[i] = M.format(result, entry.root, entry.client)
      else
        -- The last status the server sent (its notification), saying so.
        local last = clients.status[entry.client.id]
        local why = err and ("moelsp/status failed: " .. tostring(err.message)) or "moelsp/status gave no status"
        sections[i] = M.format(last or { state = "unknown" }, entry.root, entry.client,
          last and (why .. "; the last status it sent follows") or why)
      end
      done()
    end, nil)
    if not ok then
      sections[i] = M.format(clients.status[entry.client.id] or { state = "stopped" }, entry.root, entry.client)
      done()
    end
  end
end

--- A short text for a statusline: "moelsp: ready" etc. ("" when not attached).
function M.statusline(bufnr)
  local c = clients.for_buffer(bufnr or 0)
  if not c then return "" end
  local st = clients.status[c.id]
  local state = st and st.state or "starting"
  if not require("moelsp.completion").enabled then
    state = state .. " (off)"
  elseif st and type(st.completions) == "table" then
    local c = st.completions
    local left = tonumber(c.snoozeLeftMs) or 0
    -- (the snooze as of the last status: it may have ended since)
    if left > 0 and st._received and (left - (util.uv.now() - st._received)) > 0 then
      state = state .. string.format(" (snoozed %d min)", math.ceil((left - (util.uv.now() - st._received)) / 60000))
    elseif c.trigger == "manual" then
      state = state .. " (manual)"
    end
  end
  return "moelsp: " .. state
end

return M

-- :MoeStatus: the server's moelsp/status (state, model, plan, tokens/s,
-- completion telemetry) in a float or a split.
local util = require("moelsp.util")
local config = require("moelsp.config")
local clients = require("moelsp.client")

local api = vim.api
local M = {}

local function num(v, fmt)
  if type(v) ~= "number" then return tostring(v) end
  return string.format(fmt or "%g", v)
end

local function mib(bytes)
  if type(bytes) ~= "number" then return "?" end
  if bytes >= 1024 * 1024 * 1024 then return string.format("%.1f GiB", bytes / 1024 ^ 3) end
  return string.format("%.1f MiB", bytes / 1024 ^ 2)
end

--- Lines describing one server's status `st` (a moelsp/status result).
function M.format(st, root, client)
  local lines = {}
  local function add(s)
    for _, l in ipairs(util.split_lines(s)) do lines[#lines + 1] = l end
  end
  add("# moelsp" .. (root and ("  " .. root) or ""))
  add("")
  add(string.format("state:        %s%s", st.state or "?", st.message and st.message ~= "" and ("  (" .. st.message .. ")") or ""))
  if st.model then add("model:        " .. tostring(st.model)) end
  if st.tokensPerSecond then add("tokens/s:     " .. num(st.tokensPerSecond, "%.1f") .. "  (last generation)") end
  local p = st.plan
  if type(p) == "table" then
    local kv = p.kvCache or {}
    local ex = p.experts or {}
    add(string.format("plan:         %s, %s threads, weights %s, context %s, KV %s x %s tokens (%s)%s, batch <= %s",
      tostring(p.backend or "cpu"), tostring(p.threads or "?"), tostring(p.weights or "?"),
      tostring(p.contextSize or "?"), tostring(kv.type or "?"), tostring(kv.tokens or "?"), mib(kv.bytes),
      kv.prefixCache and ", prefix cache" or "", tostring(p.batch and p.batch.max or "?")))
    if ex.prefetch or (ex.cacheExperts and ex.cacheExperts > 0) then
      add(string.format("experts:      prefetch %s (distance %s), hot cache %s experts",
        tostring(ex.prefetch), tostring(ex.prefetchDistance), tostring(ex.cacheExperts)))
    end
  end
  local c = st.completions
  if type(c) == "table" then
    local lat = c.latencyMs or {}
    add(string.format("completions:  %s requests, %s shown, %s accepted, %s partially, %s cancelled, %s from cache",
      num(c.requests), num(c.shown), num(c.accepted), num(c.partiallyAccepted), num(c.cancelled), num(c.cacheHits)))
    add(string.format("              latency p50 %s ms, p95 %s ms (%s samples); prompt tokens %s (%s reused)",
      num(lat.p50, "%.0f"), num(lat.p95, "%.0f"), num(lat.samples), num(c.promptTokens), num(c.promptTokensReused)))
    local b = c.breakdown
    if type(b) == "table" and type(b.answers) == "number" and b.answers > 0 then
      local per = function(v) return type(v) == "number" and v / b.answers or nil end
      add(string.format("              per answer: %s ms = queue %s + prompt %s (%s new tokens) + decode %s (%s tokens)",
        num(per(b.totalMs), "%.0f"), num(per(b.queueMs), "%.0f"), num(per(b.promptMs), "%.0f"),
        num(per(b.promptTokensNew), "%.1f"), num(per(b.generateMs), "%.0f"), num(per(b.generatedTokens), "%.1f")))
    end
  end
  local k = st.kvCache
  if type(k) == "table" then
    add(string.format("kv cache:     %s/%s blocks in use, %s cached, prefix hit rate %s",
      num(k.blocksInUse), num(k.blocksTotal), num(k.blocksCached), num(k.prefixHitRate, "%.2f")))
  end
  local sc = st.scheduler
  if type(sc) == "table" then
    add(string.format("scheduler:    %s requests, %s running, %s waiting, mean batch %s, %s preemptions",
      num(sc.requests), num(sc.running), num(sc.waiting), num(sc.meanBatch, "%.2f"), num(sc.preemptions)))
  end
  if client then
    local comp = require("moelsp.completion")
    local cc = type(st.completions) == "table" and st.completions or {}
    add(string.format("controls:     trigger %s, snoozed %s", tostring(cc.trigger or "automatic"),
      (tonumber(cc.snoozeLeftMs) or 0) > 0 and string.format("for %d s more", math.ceil(cc.snoozeLeftMs / 1000)) or "no"))
    add(string.format("client:       id %d, inline completions %s (%s, debounce %s ms)", client.id,
      comp.enabled and "on" or "off", comp.use_builtin() and "vim.lsp.inline_completion" or "extmark ghost text",
      config.get().debounce or 0))
  end
  if type(p) == "table" and type(p.reasons) == "table" and #p.reasons > 0 then
    add("")
    add("## plan")
    for _, r in ipairs(p.reasons) do
      add(string.format("- %s = %s: %s", tostring(r.key), tostring(r.value), tostring(r.why)))
    end
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
      local st = (not err and type(result) == "table") and result or clients.status[entry.client.id] or { state = "unknown" }
      if err then st = vim.tbl_extend("force", {}, st, { message = "moelsp/status failed: " .. tostring(err.message) }) end
      sections[i] = M.format(st, entry.root, entry.client)
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

-- The moelsp language servers: one per root, started on demand, attached to
-- buffers next to whatever other servers the user runs.
local util = require("moelsp.util")
local config = require("moelsp.config")

local M = {}

M.by_root = {} -- root dir -> client id
M.status = {} -- client id -> last moelsp/status params
M.log = {} -- recent window/logMessage texts (all moelsp clients)
local ready_waiters = {} -- client id -> { fn, ... }
local progress_routes = {} -- $/progress token -> fn(value)
local error_reported = {} -- client id -> message already shown

local function push_log(text)
  table.insert(M.log, os.date("%H:%M:%S ") .. text)
  if #M.log > 200 then table.remove(M.log, 1) end
end

--- The server command as configured, with the binary resolved on $PATH.
function M.command()
  local cmd = vim.deepcopy(config.get().cmd)
  return cmd
end

--- The binary's full path, or nil and a reason.
function M.binary()
  local bin = M.command()[1]
  if not bin or bin == "" then return nil, "no server command configured" end
  local path = vim.fn.exepath(bin)
  if path == "" then
    return nil, string.format("'%s' is not an executable (set path = '/path/to/moelsp' in setup{})", bin)
  end
  return path
end

--- Route the $/progress notifications of `token` to fn(value) until removed.
function M.route_progress(token, fn)
  progress_routes[token] = fn
end
function M.unroute_progress(token)
  progress_routes[token] = nil
end

--- The last status of a client (nil until the first moelsp/status).
function M.state(client_id)
  local s = M.status[client_id]
  return s and s.state or nil
end

--- Runs fn(client) once the client's model is ready (at once if it is);
--- fn(nil, message) if it fails to load.
function M.when_ready(client_id, fn)
  local st = M.state(client_id)
  local client = util.get_client(client_id)
  if not client then return fn(nil, "the server is not running") end
  if st == "ready" or st == "busy" then return fn(client) end
  if st == "error" then return fn(nil, M.status[client_id].message or "the model failed to load") end
  ready_waiters[client_id] = ready_waiters[client_id] or {}
  table.insert(ready_waiters[client_id], fn)
end

local function flush_waiters(client_id, ok, message)
  local list = ready_waiters[client_id]
  if not list then return end
  ready_waiters[client_id] = nil
  for _, fn in ipairs(list) do
    local client = ok and util.get_client(client_id) or nil
    local good, err = pcall(fn, client, message)
    if not good then util.error(tostring(err)) end
  end
end

local function on_status(_, result, ctx)
  if type(result) ~= "table" then return end
  local id = ctx.client_id
  local was = M.status[id] and M.status[id].state
  result._received = util.uv.now() -- (completions.snoozeLeftMs counts from here)
  M.status[id] = result
  if result.state == "ready" or result.state == "busy" then
    error_reported[id] = nil
    flush_waiters(id, true)
    if was ~= "ready" and was ~= "busy" then require("moelsp.completion").on_ready(id) end
  elseif result.state == "error" then
    local msg = result.message or "the model failed to load"
    if error_reported[id] ~= msg then
      error_reported[id] = msg
      util.error(msg .. " (:MoeStatus, :MoeLog)")
    end
    flush_waiters(id, false, msg)
  end
  util.user_event("MoelspStatus")
  return vim.NIL
end

local function on_progress(err, result, ctx, cfg)
  local route = result and result.token ~= nil and progress_routes[result.token]
  if route then
    local ok, e = pcall(route, result.value)
    if not ok then util.error(tostring(e)) end
    return
  end
  local default = vim.lsp.handlers["$/progress"]
  if default then return default(err, result, ctx, cfg) end
end

local function on_log_message(err, result, ctx, cfg)
  if result and result.message then push_log(result.message) end
  local default = vim.lsp.handlers["window/logMessage"]
  if default then return default(err, result, ctx, cfg) end
end

local function capabilities()
  local o = config.get()
  local caps = vim.lsp.protocol.make_client_capabilities()
  if o.capabilities then caps = vim.tbl_deep_extend("force", caps, o.capabilities) end
  caps.textDocument = caps.textDocument or {}
  -- Neovim < 0.12 does not know inline completions: declare them, the plugin
  -- sends the requests itself. (0.12+ declares its own.)
  if not caps.textDocument.inlineCompletion then
    caps.textDocument.inlineCompletion = { dynamicRegistration = false }
  end
  return caps
end

local function find_root(bufnr)
  local o = config.get()
  local name = vim.api.nvim_buf_get_name(bufnr)
  local cwd = util.uv.cwd()
  if name == "" then return cwd end
  local dir = vim.fn.fnamemodify(name, ":p:h")
  while dir and dir ~= "" do
    for _, marker in ipairs(o.root_markers or {}) do
      if util.uv.fs_stat(dir .. "/" .. marker) then return dir end
    end
    local parent = vim.fn.fnamemodify(dir, ":h")
    if parent == dir then break end
    dir = parent
  end
  return cwd
end
M.find_root = find_root

local function client_config(root)
  local o = config.get()
  local completion = require("moelsp.completion")
  local init = o.init_options
  if init and next(init) == nil then init = nil end
  return {
    name = "moelsp",
    cmd = M.command(),
    root_dir = root,
    workspace_folders = { { uri = vim.uri_from_fname(root), name = root } },
    capabilities = capabilities(),
    init_options = init,
    flags = vim.tbl_extend("force", { debounce_text_changes = 50 }, o.flags or {}),
    handlers = {
      ["moelsp/status"] = on_status,
      ["$/progress"] = on_progress,
      ["window/logMessage"] = on_log_message,
    },
    -- The inline item's command: Neovim's own inline completion (0.12+)
    -- runs it client-side first; forward it to the server as telemetry.
    commands = {
      ["moelsp.accepted"] = function(command, ctx)
        local c = util.get_client(ctx and ctx.client_id)
        if c then
          util.request(c, "workspace/executeCommand",
            { command = command.command, arguments = command.arguments }, function() end, ctx.bufnr)
        end
      end,
    },
    on_attach = function(client, bufnr)
      completion.attach(bufnr, client.id)
      if o.on_attach then o.on_attach(client, bufnr) end
    end,
    on_exit = function(code, signal, client_id)
      vim.schedule(function()
        for r, id in pairs(M.by_root) do
          if id == client_id then M.by_root[r] = nil end
        end
        flush_waiters(client_id, false, "the server exited")
        completion.on_client_exit(client_id)
        if code ~= 0 and not M.stopping then
          util.warn(string.format("the server exited with code %d%s (:MoeLog)", code,
            signal ~= 0 and (" signal " .. signal) or ""))
        end
        M.status[client_id] = { state = "stopped", message = "exited with code " .. tostring(code) }
        util.user_event("MoelspStatus")
      end)
    end,
  }
end

--- Whether moelsp should serve this buffer.
function M.wanted(bufnr)
  local o = config.get()
  if not vim.api.nvim_buf_is_valid(bufnr) then return false end
  if vim.bo[bufnr].buftype ~= "" then return false end
  local name = vim.api.nvim_buf_get_name(bufnr)
  if name == "" or name:match("^%a[%w+.-]*://") then return false end
  local ft = vim.bo[bufnr].filetype
  local ok = false
  for _, f in ipairs(o.filetypes) do
    if f == "*" or f == ft then
      ok = true
      break
    end
  end
  if not ok then return false end
  local size = vim.fn.getfsize(name)
  if o.max_file_size and size > o.max_file_size then return false end
  return true
end

--- The moelsp client attached to `bufnr`, if any.
function M.for_buffer(bufnr)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  for _, id in pairs(M.by_root) do
    local c = util.get_client(id)
    if c and vim.lsp.buf_is_attached(bufnr, id) then return c end
  end
  return nil
end

--- Any running moelsp client: the one of the buffer, of the cwd's root, or the first.
function M.any(bufnr)
  local c = M.for_buffer(bufnr)
  if c then return c end
  local id = M.by_root[util.uv.cwd()]
  c = util.get_client(id)
  if c then return c end
  for _, cid in pairs(M.by_root) do
    c = util.get_client(cid)
    if c then return c end
  end
  return nil
end

function M.all()
  local out = {}
  for root, id in pairs(M.by_root) do
    local c = util.get_client(id)
    if c then table.insert(out, { root = root, client = c }) end
  end
  return out
end

local warned_binary = false

local function reuse(c, conf)
  return c.name == conf.name and (c.root_dir or (c.config and c.config.root_dir)) == conf.root_dir
end

--- Attaches `bufnr` to the server of its root (starting it when needed).
--- `force`: attach even when the filetype is not configured. Returns the client id.
function M.attach(bufnr, force)
  bufnr = (bufnr == nil or bufnr == 0) and vim.api.nvim_get_current_buf() or bufnr
  if not force and not M.wanted(bufnr) then return nil end
  if vim.api.nvim_buf_get_name(bufnr) == "" or vim.bo[bufnr].buftype ~= "" then return nil end
  local existing = M.for_buffer(bufnr)
  if existing then return existing.id end
  local bin, why = M.binary()
  if not bin then
    if not warned_binary then
      warned_binary = true
      util.error(why)
    end
    return nil
  end
  local root = find_root(bufnr)
  local id = M.by_root[root]
  if id and not util.get_client(id) then
    id = nil
    M.by_root[root] = nil
  end
  if util.has("nvim-0.11") then
    id = vim.lsp.start(client_config(root), { bufnr = bufnr, reuse_client = reuse })
  else
    if not id then id = vim.lsp.start_client(client_config(root)) end
    if id then vim.lsp.buf_attach_client(bufnr, id) end
  end
  if id then M.by_root[root] = id end
  return id
end

--- The server of `root` (default: the cwd), started without a buffer when
--- none runs. Returns the client id.
function M.start(root)
  root = root or util.uv.cwd()
  local id = M.by_root[root]
  if util.get_client(id) then return id end
  local bin, why = M.binary()
  if not bin then
    util.error(why)
    return nil
  end
  if util.has("nvim-0.11") then
    id = vim.lsp.start(client_config(root), { attach = false, reuse_client = reuse })
  else
    id = vim.lsp.start_client(client_config(root))
  end
  if id then M.by_root[root] = id end
  return id
end

--- Stops every moelsp server.
function M.stop_all()
  M.stopping = true
  for root, id in pairs(M.by_root) do
    local c = util.get_client(id)
    if c then util.stop(c) end
    M.by_root[root] = nil
  end
  vim.defer_fn(function() M.stopping = false end, 3000)
end

return M

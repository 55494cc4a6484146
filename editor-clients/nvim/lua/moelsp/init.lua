-- moelsp for Neovim: inline completions (ghost text) and chat from the local
-- moelsp language server.
--
--   require("moelsp").setup{ path = "/path/to/moelsp" }
--
-- See editor-clients/nvim/README.md for the options, keys and commands.
local config = require("moelsp.config")
local util = require("moelsp.util")

local M = {}

local function attach_existing()
  local clients = require("moelsp.client")
  for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(bufnr) and clients.wanted(bufnr) then clients.attach(bufnr) end
  end
end

--- Configures the plugin and attaches the buffers of the configured
--- filetypes (now and as they open). Calling it again reconfigures.
function M.setup(opts)
  if not util.has("nvim-0.7") then
    util.error("needs Neovim 0.7 or later")
    return
  end
  local o = config.merge(opts, true)
  local completion = require("moelsp.completion")
  completion.enabled = o.enable ~= false
  vim.cmd("highlight default link MoelspSuggestion Comment")
  local group = vim.api.nvim_create_augroup("moelsp", { clear = true })
  local has_star = false
  for _, ft in ipairs(o.filetypes) do
    if ft == "*" then has_star = true end
  end
  vim.api.nvim_create_autocmd("FileType", {
    group = group,
    pattern = has_star and "*" or o.filetypes,
    callback = function(args)
      -- After the other FileType handlers (the buffer's options are set).
      vim.schedule(function()
        if vim.api.nvim_buf_is_valid(args.buf) then require("moelsp.client").attach(args.buf) end
      end)
    end,
  })
  vim.api.nvim_create_autocmd("ColorScheme", {
    group = group,
    callback = function() vim.cmd("highlight default link MoelspSuggestion Comment") end,
  })
  vim.api.nvim_create_autocmd({ "WinScrolled", "WinEnter", "BufWinEnter" }, {
    group = group,
    callback = function() require("moelsp.definitions").schedule_views() end,
  })
  vim.api.nvim_create_autocmd("VimLeavePre", {
    group = group,
    callback = function() require("moelsp.client").stopping = true end,
  })
  attach_existing()
  M._setup_done = true
end

-- Completions -----------------------------------------------------------------

--- Accepts the whole visible suggestion; false when there is none.
function M.accept() return require("moelsp.completion").accept("all") end
--- Accepts the next word of the visible suggestion.
function M.accept_word() return require("moelsp.completion").accept("word") end
--- Accepts the rest of the suggestion's current line.
function M.accept_line() return require("moelsp.completion").accept("line") end
--- Asks for a suggestion now (explicit request: up to three alternatives).
function M.trigger() return require("moelsp.completion").trigger(0) end
--- Next / previous alternative (asks when there is none).
function M.next() return require("moelsp.completion").cycle(0, 1) end
function M.prev() return require("moelsp.completion").cycle(0, -1) end
--- Hides the suggestion and cancels the request in flight.
function M.dismiss() return require("moelsp.completion").dismiss(0) end
--- Whether a suggestion is visible in the current buffer.
function M.is_visible() return require("moelsp.completion").is_visible(0) end

--- Switches inline completions on/off (toggles without an argument).
function M.toggle(on)
  local completion = require("moelsp.completion")
  if on == nil then on = not completion.enabled end
  completion.set_enabled(on)
  util.info("inline completions " .. (completion.enabled and "on" or "off"))
  return completion.enabled
end

--- No suggestions as you type for `minutes` (default 5; 0 resumes) in every
--- moelsp server; an explicit ask (<M-]>, M.trigger) is still answered.
function M.snooze(minutes)
  minutes = tonumber(minutes) or 5
  local clients = require("moelsp.client").all()
  if #clients == 0 then return util.warn("no moelsp server is running") end
  for _, e in ipairs(clients) do
    util.request(e.client, "workspace/executeCommand", { command = "moelsp.snooze", arguments = { minutes } },
      function(err)
        if err then return util.warn("snooze: " .. tostring(err.message)) end
        util.request(e.client, "moelsp/status", {}, function(_, st)
          if type(st) == "table" then
            st._received = util.uv.now()
            require("moelsp.client").status[e.client.id] = st
          end
          util.user_event("MoelspStatus")
        end)
      end)
  end
  util.info(minutes > 0 and string.format("no suggestions as you type for %g min", minutes) or "suggestions resumed")
end
function M.resume() return M.snooze(0) end

--- Manual mode (the server's completion.trigger): suggestions only when
--- asked (<M-]>). Toggles without an argument; applies to running servers and
--- to the ones started later.
function M.manual(on)
  local o = config.get()
  o.init_options.completion = o.init_options.completion or {}
  if on == nil then -- toggle what the server does now (its config file may have set it)
    local c = require("moelsp.client").any()
    local st = c and require("moelsp.client").status[c.id]
    local now = st and type(st.completions) == "table" and st.completions.trigger or o.init_options.completion.trigger
    on = now ~= "manual"
  end
  local trigger = on and "manual" or "automatic"
  o.init_options.completion.trigger = trigger
  for _, e in ipairs(require("moelsp.client").all()) do
    util.notify(e.client, "workspace/didChangeConfiguration",
      { settings = { moelsp = { completion = { trigger = trigger } } } })
  end
  util.info(on and "suggestions only when asked (<M-]>)" or "suggestions as you type")
  return on
end

-- Chat ------------------------------------------------------------------------

--- Asks a question; opts.line1/line2/range add those lines as context.
function M.chat(question, opts) return require("moelsp.chat").chat(question, opts) end
function M.explain(opts) return require("moelsp.chat").command("explain", opts) end
function M.fix(opts) return require("moelsp.chat").command("fix", opts) end
function M.document(opts) return require("moelsp.chat").command("document", opts) end

-- Status ----------------------------------------------------------------------

function M.status() return require("moelsp.status").show() end
--- "moelsp: ready" (or loading/busy/error, "(off)" when disabled) for a statusline.
function M.statusline(bufnr) return require("moelsp.status").statusline(bufnr) end

--- The moelsp client attached to a buffer (current by default).
function M.client(bufnr) return require("moelsp.client").for_buffer(bufnr or 0) end

--- Opens the LSP log (the server's stderr lands there).
function M.open_log()
  vim.cmd("tabnew " .. vim.fn.fnameescape(util.log_path()))
  vim.cmd("normal! G")
end

return M

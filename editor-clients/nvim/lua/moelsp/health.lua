-- :checkhealth moelsp
-- Neovim 0.7 reports through require("health").report_*, 0.8/0.9 through
-- vim.health.report_*, 0.10+ through vim.health.start/ok/warn/error/info.
local M = {}

local function reporter()
  local h = vim.health
  if not h or not (h.start or h.report_start) then h = require("health") end
  return {
    start = h.start or h.report_start,
    ok = h.ok or h.report_ok,
    warn = h.warn or h.report_warn,
    error = h.error or h.report_error,
    info = h.info or h.report_info,
  }
end

function M.check()
  local r = reporter()
  local util = require("moelsp.util")
  local config = require("moelsp.config")
  local clients = require("moelsp.client")
  local completion = require("moelsp.completion")

  r.start("moelsp: Neovim")
  local v = vim.version()
  local version = string.format("%d.%d.%d", v.major, v.minor, v.patch)
  if util.has("nvim-0.7") then
    r.ok("Neovim " .. version)
  else
    r.error("Neovim " .. version .. " is too old: moelsp needs 0.7 or later")
  end
  if completion.use_builtin() then
    r.ok("inline completions: vim.lsp.inline_completion (built into this Neovim)")
  else
    r.ok("inline completions: the plugin's extmark ghost text"
      .. (util.has("nvim-0.10") and " (inline virtual text)" or " (overlay virtual text)"))
  end

  r.start("moelsp: setup")
  if not config.options then
    r.warn("require('moelsp').setup{} has not been called", { "Call it from your init.lua" })
  else
    r.ok("setup{} called")
  end
  local o = config.get()
  r.info("filetypes: " .. table.concat(o.filetypes, ", "))
  r.info("root markers: " .. table.concat(o.root_markers, ", ") .. " (else the current directory)")
  r.info(string.format("completions %s, debounce %s ms", completion.enabled and "enabled" or "disabled (:MoeToggle)",
    o.debounce or 0))

  r.start("moelsp: server binary")
  local bin, why = clients.binary()
  if not bin then
    r.error(why, { "Install moelsp, or pass its path: require('moelsp').setup{ path = '/path/to/moelsp' }" })
  else
    local out = vim.fn.system({ bin, "--version" })
    if vim.v.shell_error ~= 0 then
      r.error(bin .. " --version failed: " .. vim.trim(out))
    else
      r.ok(bin .. ": " .. vim.trim(out))
    end
    r.info("command: " .. table.concat(clients.command(), " "))
  end

  r.start("moelsp: servers")
  local all = clients.all()
  if #all == 0 then
    r.info("no server running (one starts when a buffer of a configured filetype opens)")
  end
  for _, e in ipairs(all) do
    local st = clients.status[e.client.id] or {}
    -- The server's own line when it has sent one (the same words every editor shows).
    local desc = e.root .. ": " .. (type(st.summaryLine) == "string" and st.summaryLine or string.format("%s%s%s",
      st.state or "starting", st.model and (", model " .. st.model) or "",
      st.message and st.message ~= "" and (" (" .. st.message .. ")") or ""))
    if st.state == "ready" or st.state == "busy" then
      r.ok(desc)
    elseif st.state == "error" then
      r.error(desc, { ":MoeLog shows the server's log; settings go in setup{ init_options = { model = ... } }" })
    else
      r.warn(desc)
    end
    local caps = e.client.server_capabilities or {}
    if caps.inlineCompletionProvider == nil and not completion.use_builtin() then
      r.info("the server declares no inlineCompletionProvider (the plugin asks for it anyway)")
    end
  end
  r.info("LSP log: " .. util.log_path() .. " (:MoeLog)")
end

return M

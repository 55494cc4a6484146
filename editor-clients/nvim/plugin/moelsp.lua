-- moelsp: user commands. The server starts after require("moelsp").setup{}.
if vim.g.loaded_moelsp or vim.fn.has("nvim-0.7") == 0 then return end
vim.g.loaded_moelsp = true

local function moelsp() return require("moelsp") end
local function range_opts(args)
  return { line1 = args.line1, line2 = args.line2, range = args.range, bufnr = vim.api.nvim_get_current_buf() }
end
local command = vim.api.nvim_create_user_command

command("MoeChat", function(args) moelsp().chat(args.args, range_opts(args)) end,
  { nargs = "*", range = true, desc = "moelsp: ask a question (a range adds those lines as context)" })
command("MoeExplain", function(args) moelsp().explain(range_opts(args)) end,
  { range = true, desc = "moelsp: explain the range (the whole buffer without one)" })
command("MoeFix", function(args) moelsp().fix(range_opts(args)) end,
  { range = true, desc = "moelsp: find bugs in the range and fix them" })
command("MoeDocument", function(args) moelsp().document(range_opts(args)) end,
  { range = true, desc = "moelsp: write documentation comments for the range" })
command("MoeStatus", function() moelsp().status() end, { desc = "moelsp: server state, model, plan, telemetry" })
command("MoeToggle", function(args)
  local on = nil
  if args.args == "on" then on = true elseif args.args == "off" then on = false end
  moelsp().toggle(on)
end, { nargs = "?", complete = function() return { "on", "off" } end, desc = "moelsp: inline completions on/off" })
command("MoeSnooze", function(args) moelsp().snooze(args.args ~= "" and tonumber(args.args) or nil) end,
  { nargs = "?", desc = "moelsp: no suggestions as you type for N minutes (default 5; 0 resumes)" })
command("MoeResume", function() moelsp().resume() end, { desc = "moelsp: end a snooze" })
command("MoeManual", function(args)
  local on = nil
  if args.args == "on" then on = true elseif args.args == "off" then on = false end
  moelsp().manual(on)
end, { nargs = "?", complete = function() return { "on", "off" } end,
  desc = "moelsp: suggestions only when asked (on) or as you type (off)" })
command("MoeLog", function() moelsp().open_log() end, { desc = "moelsp: open the LSP log" })
command("MoeModel", function(args) require("moelsp.models").choose(args.args) end,
  { nargs = "?", complete = "file",
    desc = "moelsp: choose the model (the cache, downloads that fit); or MODEL: a GGUF file or owner/repo:QUANT" })

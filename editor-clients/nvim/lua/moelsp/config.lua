-- Options of require("moelsp").setup{...} and their defaults.
local M = {}

M.defaults = {
  -- The server: `cmd` (a list) wins over `path` (the moelsp binary); by
  -- default `moelsp` from $PATH.
  cmd = nil,
  path = nil,
  -- Buffers of these filetypes get the server (alongside any other language
  -- servers). { "*" } means every filetype.
  filetypes = {
    "c", "cpp", "cuda", "objc", "objcpp", "cs", "java", "kotlin", "scala", "groovy",
    "go", "rust", "zig", "python", "ruby", "perl", "php", "lua", "r", "julia",
    "javascript", "javascriptreact", "typescript", "typescriptreact", "vue", "svelte",
    "html", "css", "scss", "sh", "bash", "zsh", "fish", "ps1", "sql", "swift", "dart",
    "haskell", "ocaml", "elixir", "erlang", "clojure", "nim", "vim", "cmake", "make",
    "dockerfile", "yaml", "toml", "json", "proto", "terraform",
  },
  -- One server per root: the nearest directory above the file holding one of
  -- these, else the current directory.
  root_markers = { ".git", ".hg", ".svn", ".jj" },
  -- initializationOptions, see the server's settings (model, threads,
  -- contextSize, completion = { maxTokens, timeBudgetMs, debounceMs, draftTokens, fimOrder, contextTokens },
  -- workspace = { index, maxFiles }, chat = { maxTokens, template }, exclude = ".env*,*.pem,...", ...).
  -- `settings` is an alias merged in.
  init_options = {},
  settings = nil,
  -- Inline completions on at start (:MoeToggle switches). A table is
  -- Copilot's per-filetype form, { ["*"] = true, markdown = false }: where
  -- suggestions come as you type (the server's completion.languages; an
  -- explicit ask, <M-]>, is still answered). The server's default turns
  -- markdown, text and gitcommit off.
  enable = true,
  -- Milliseconds after the last keystroke before asking the server.
  debounce = 75,
  -- "auto": vim.lsp.inline_completion where Neovim has it (0.12+), the
  -- plugin's extmark ghost text elsewhere; "builtin" or "extmark" to force.
  inline = "auto",
  -- Ask for a suggestion when entering insert mode and when the cursor moves
  -- in insert mode (typing always asks).
  trigger_on_insert_enter = true,
  trigger_on_cursor_move = true,
  -- Insert-mode keys; false disables one. A key that finds no suggestion does
  -- what it did before (your mapping, or the key itself).
  keymaps = {
    accept = "<Tab>",
    accept_word = "<M-w>",
    accept_line = "<M-l>",
    next = "<M-]>", -- next alternative, or ask now (explicit request: up to 3 alternatives)
    prev = "<M-[>",
    dismiss = "<C-]>",
  },
  -- Highlight group of the ghost text (linked to Comment unless you define it).
  hl_group = "MoelspSuggestion",
  -- Files larger than this (bytes) are not sent to the server.
  max_file_size = 2 * 1024 * 1024,
  -- Where :MoeChat & co. put their answer: "vertical", "horizontal", "tab" or "current".
  chat_window = "vertical",
  -- :MoeStatus in a "float" or a "split".
  status_window = "float",
  -- Extra fields for the client config (vim.lsp.start_client).
  capabilities = nil,
  on_attach = nil,
  flags = nil,
}

M.options = nil

--- The options of `user` over the defaults; `store` (setup) keeps them.
function M.merge(user, store)
  user = user or {}
  local o = vim.tbl_deep_extend("force", {}, M.defaults, user)
  -- Lists replace, never merge index by index.
  if user.filetypes then o.filetypes = vim.deepcopy(user.filetypes) end
  if user.root_markers then o.root_markers = vim.deepcopy(user.root_markers) end
  if user.cmd then o.cmd = vim.deepcopy(user.cmd) end
  if user.keymaps == false then
    o.keymaps = {}
  end
  o.init_options = vim.tbl_deep_extend("force", {}, o.init_options or {}, user.settings or {})
  if type(user.enable) == "table" then
    local rules = M.language_rules(user.enable)
    o.init_options.completion = vim.tbl_extend("keep", o.init_options.completion or {}, { languages = rules })
  end
  if not o.cmd then
    o.cmd = { o.path or "moelsp", "lsp" }
  elseif type(o.cmd) == "string" then
    o.cmd = { o.cmd, "lsp" }
  end
  if store then M.options = o end
  return o
end

--- { ["*"] = true, markdown = false } as the server's rules, "*,!markdown"
--- ("*" first, then the filetypes in order).
function M.language_rules(t)
  local keys = {}
  for k, v in pairs(t) do
    if type(k) == "string" and type(v) == "boolean" and k ~= "*" and not k:find("[,!%s]") then
      table.insert(keys, k)
    end
  end
  table.sort(keys)
  local out = {}
  if type(t["*"]) == "boolean" then table.insert(out, (t["*"] and "" or "!") .. "*") end
  for _, k in ipairs(keys) do table.insert(out, (t[k] and "" or "!") .. k) end
  return table.concat(out, ",")
end

local fallback
--- The options in force (the defaults before setup{}).
function M.get()
  if M.options then return M.options end
  fallback = fallback or M.merge({}, false)
  return fallback
end

return M

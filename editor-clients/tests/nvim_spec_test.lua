-- The lazy.nvim spec of editor-clients/nvim/README.md ("lazy.nvim, from the
-- repository"), run as lazy.nvim runs it: the block is read from the README
-- and evaluated, and its config(plugin) is called with plugin.dir a clone's
-- layout (editor-clients/ and build/cli/moelsp where a clone built by its
-- `build` command has them) and nothing of the plugin on 'runtimepath' yet.
-- Then the plugin must be there: its commands, a server attached to a Python
-- buffer and ready.
--   MOELSP_BINARY=build/cli/moelsp nvim --headless -u NONE -l editor-clients/tests/nvim_spec_test.lua
local uv = vim.uv or vim.loop
local function fail(msg)
  io.stderr:write("nvim spec test FAILED: " .. msg .. "\n")
  vim.cmd("cquit 1")
end
local binary = os.getenv("MOELSP_BINARY")
local here = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h")
local repo = vim.fn.fnamemodify(here, ":h:h")

-- 1. The spec, from the README.
local readme = table.concat(vim.fn.readfile(repo .. "/editor-clients/nvim/README.md"), "\n")
local block = readme:match("%*%*lazy%.nvim, from the repository%*%*.-```lua\n(.-)```")
if not block then return fail("no lazy.nvim spec in editor-clients/nvim/README.md") end
local chunk, err = (loadstring or load)("return " .. block)
if not chunk then return fail("the spec does not parse: " .. tostring(err)) end
local spec = chunk()
if type(spec) ~= "table" or type(spec[1]) ~= "string" or not spec[1]:match("^[%w_.-]+/[%w_.-]+$") then
  return fail("the spec does not name a repository: " .. vim.inspect(spec))
end
if spec.lazy ~= false or type(spec.build) ~= "string" or not spec.build:match("cmake %-%-build build") then
  return fail("the spec should load at start and build into build/: " .. vim.inspect(spec))
end

-- 2. A clone's layout, as lazy.nvim leaves it after `build` ran.
local dir = vim.fn.tempname()
vim.fn.mkdir(dir .. "/build/cli", "p")
assert(uv.fs_symlink(repo .. "/editor-clients", dir .. "/editor-clients"))
assert(uv.fs_symlink(binary, dir .. "/build/cli/moelsp"))
if vim.fn.exists(":MoeChat") == 2 or pcall(require, "moelsp") then return fail("the plugin was loaded before config ran") end

-- 3. config(plugin), as lazy.nvim calls it.
local ok, e = pcall(spec.config, { dir = dir, name = "moelsp" })
if not ok then return fail("config failed: " .. tostring(e)) end
if vim.fn.exists(":MoeChat") ~= 2 or vim.fn.exists(":MoeModel") ~= 2 then return fail("no :MoeChat / :MoeModel after config") end

-- 4. A Python buffer gets a server, which gets ready.
local project = vim.fn.tempname()
vim.fn.mkdir(project .. "/.git", "p")
vim.fn.writefile({ "def main():", "    " }, project .. "/main.py")
vim.cmd("edit " .. project .. "/main.py")
vim.bo.filetype = "python"
local clients = require("moelsp.client")
local t0 = uv.now()
local ready = vim.wait(60000, function()
  local c = require("moelsp").client(0)
  return c ~= nil and clients.state(c.id) == "ready"
end, 50)
if not ready then return fail("no ready server for the buffer in 60 s") end
io.stdout:write(string.format("nvim spec test passed: the README's lazy.nvim spec (%s) loaded the plugin; a server "
  .. "from %s was ready in %d ms\n", spec[1], "build/cli/moelsp", uv.now() - t0))
vim.cmd("qall!")

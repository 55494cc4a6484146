-- :MoeModel: which model the moelsp servers run. Without an argument, a
-- vim.ui.select over what the server's moelsp/models lists: the embedded
-- model, the models in the cache, the downloads its model guide says fit
-- this machine (the plan run on each file's header, read from the hub).
-- With one: a GGUF path or a Hugging Face reference (owner/repo:QUANT).
-- The choice is the `model` setting, sent to every running server
-- (workspace/didChangeConfiguration: it reloads in place, or pulls a
-- reference while the embedded model keeps answering) and kept for servers
-- started later in this session; put it in setup{ init_options } to keep it.
local util = require("moelsp.util")
local config = require("moelsp.config")

local M = {}

local function size(bytes)
  if bytes >= 2 ^ 30 then return string.format("%.1f GiB", bytes / 2 ^ 30) end
  return string.format("%d MiB", math.floor(bytes / 2 ^ 20 + 0.5))
end

local function suggestion(r)
  if (r.bytes or 0) == 0 then
    return { label = string.format("%s  (not available: %s)", r.ref, r.error), value = r.ref }
  end
  local plan
  if r.fits then
    plan = string.format("fits: %s, context %d, %s", r.where, r.context, size(r.plannedBytes))
    if (r.decodeTokensPerSecond or 0) > 0 then
      plan = plan .. string.format(", ~%d tokens/s", math.floor(r.decodeTokensPerSecond + 0.5))
    end
  else
    plan = "does not fit: " .. r.error
  end
  return {
    label = string.format("download %s  %s%s  %s  (%s)", r.ref, size(r.bytes), r.cached and " (cached)" or "", plan,
      r.use),
    value = r.ref,
    fits = r.fits,
  }
end

--- The choices moelsp/models' answer `m` offers, in order.
function M.items(m)
  local current = m.model and m.model.setting
  local items = { { label = "embedded default model", value = "" } }
  for _, f in ipairs(m.cached or {}) do
    if f.partial then
      table.insert(items, { label = string.format("resume %s  (%s so far)", f.label, size(f.bytes)), value = f.ref })
    else
      table.insert(items, { label = string.format("cached %s  %s", f.label, size(f.bytes)), value = f.path })
    end
  end
  for _, r in ipairs(m.suggested or {}) do
    table.insert(items, suggestion(r))
  end
  for _, it in ipairs(items) do
    if it.value == current or (it.value == "" and current == m.embedded) then it.label = "* " .. it.label end
  end
  return items
end

-- The pull's $/progress (token moelsp/pull) in the message area.
local function follow_pull()
  require("moelsp.client").route_progress("moelsp/pull", function(v)
    if v.kind == "end" then
      require("moelsp.client").unroute_progress("moelsp/pull")
      return util.info(v.message and v.message ~= "" and ("pulled: " .. v.message) or "pull ended")
    end
    local text = string.format("moelsp: %s%s %s", v.title and (v.title .. ": ") or "",
      v.percentage and (v.percentage .. "%") or "", v.message or "")
    vim.api.nvim_echo({ { text } }, false, {})
  end)
end

--- Sends `model` ("" for the embedded one) to every running server.
function M.use(model)
  local o = config.get()
  o.init_options.model = model
  local clients = require("moelsp.client").all()
  if model:match("^hf://") or model:match("^[^/%s:]+/[^/%s:]+:%S+$") then follow_pull() end
  for _, e in ipairs(clients) do
    util.notify(e.client, "workspace/didChangeConfiguration", { settings = { moelsp = { model = model } } })
  end
  util.info(string.format("model %s%s", model == "" and "the embedded default" or model,
    #clients == 0 and " (for the next server started)" or ""))
end

--- :MoeModel [MODEL]
function M.choose(arg)
  if arg and arg ~= "" then return M.use(arg) end
  local c = require("moelsp.client").any()
  if not c then return util.warn("no moelsp server is running (open a file it serves first)") end
  util.info("asking the hub which models fit this machine…")
  util.request(c, "moelsp/models", { suggest = true }, function(err, m)
    if err or type(m) ~= "table" then return util.warn("moelsp/models: " .. tostring(err and err.message)) end
    if m.suggestError then util.warn("the model guide cannot reach the hub: " .. m.suggestError) end
    vim.ui.select(M.items(m), {
      prompt = "moelsp model (" .. m.cacheDir .. ")",
      format_item = function(it) return it.label end,
    }, function(choice)
      if not choice then return end
      if choice.fits == false then
        local ok = vim.fn.confirm("moelsp: " .. choice.value .. " does not fit this machine. Use it anyway?", "&Yes\n&No", 2)
        if ok ~= 1 then return end
      end
      M.use(choice.value)
    end)
  end)
end

return M

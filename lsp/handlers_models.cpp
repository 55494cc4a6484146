// moelsp/models: what the editors' model pickers show (VS Code's "moelsp:
// Choose Model…", Neovim's :MoeModel, Emacs's moelsp-choose-model). The
// pick itself is a settings change (`model`: a file or a hub reference),
// which reloads the engine in place or pulls the reference in the background.
//
//   params: {"suggest": bool}  (false: the cache only, answered at once;
//           true: also the guide's rows, which read each file's header from
//           the hub, a few seconds the first time, remembered after)
//   result: {"model": {"setting", "file", "state"}, "embedded", "cacheDir",
//            "cached": [{"label", "path", "bytes", "partial", "ref"}],
//            "suggested": [{"ref", "use", "bytes", "fits", "where", "context",
//                           "plannedBytes", "decodeTokensPerSecond", "error", "cached"}],
//            "suggestError": why there are no suggestions (the hub unreachable)}
#include <filesystem>

#include "assist/model_guide.h"
#include "engine/default_model.h"
#include "engine/profile.h"
#include "server_impl.h"

namespace moelsp::lsp {

namespace {

// The cache's models: a split model once (its first part); a download cut
// short with the reference that resumes it.
json cached_json(const std::string& dir) {
  json out = json::array();
  for (const auto& f : assist::cached_models(dir)) {
    std::string rel = f.rel;
    if (f.partial && rel.size() > 5) rel.resize(rel.size() - 5);  // ".part"
    if (assist::split_part(rel).first > 1) continue;
    out.push_back({{"label", rel},
                   {"path", (std::filesystem::path(dir) / rel).string()},
                   {"bytes", f.size},
                   {"partial", f.partial},
                   {"ref", "hf://" + rel}});
  }
  return out;
}

}  // namespace

void Server::Impl::on_models(const ModelsParams& p, Reply reply) {
  auto ticket = track(reply.id());
  enqueue(Lane::Chat, reply, [this, reply, ticket, suggest = p.suggest] {
    const std::string dir = assist::models_dir();
    json out = {{"cacheDir", dir}, {"embedded", embedded_model_path()}, {"cached", cached_json(dir)}};
    {
      std::lock_guard lock(reload_mu);
      out["model"]["setting"] = requested_model ? json(*requested_model) : json(nullptr);
    }
    const assist::ModelHost::Snapshot st = host.snapshot();
    out["model"]["file"] = st.file;
    out["model"]["state"] = to_string(st.phase);
    if (suggest) {
      try {
        json rows = suggested_rows(*ticket);
        for (auto& r : rows)
          r["cached"] = !assist::cached_paths(dir, assist::parse_model_ref(r["ref"].get<std::string>())).empty();
        out["suggested"] = std::move(rows);
      } catch (const std::exception& e) {
        out["suggested"] = json::array();
        out["suggestError"] = e.what();
      }
    }
    untrack(reply.id(), ticket);
    if (ticket->cancelled()) return reply.error(kRequestCancelled, "request cancelled");
    reply(std::move(out));
  });
}

json Server::Impl::suggested_rows(assist::Ticket& ticket) {
  {
    std::lock_guard lock(guide_mu);
    if (guide_rows) return *guide_rows;
  }
  const HwProfile hw = hardware_profile(ProfileOptions{});
  json rows = json::array();
  for (const auto& r : assist::suggest_models(hw, {}, ticket)) rows.push_back(assist::to_json(r));
  if (!ticket.cancelled()) {
    std::lock_guard lock(guide_mu);
    guide_rows = rows;
  }
  return rows;
}

}  // namespace moelsp::lsp

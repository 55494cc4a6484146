// moelsp pull, models, rm: real models from the Hugging Face hub into the
// cache, what the cache holds, and taking a model out of it (assist/hub.h).
// stdout carries results only (the path pulled, the list); progress and
// notes go to stderr.
#include <cstdio>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "assist/backend.h"
#include "assist/hub.h"
#include "commands.h"
#include "progress.h"

namespace moelsp::cli {

namespace {

std::string human(uint64_t bytes) {
  if (bytes >= (1ull << 30)) return fmt::format("{:.2f} GiB", double(bytes) / double(1ull << 30));
  return fmt::format("{:.1f} MiB", double(bytes) / double(1ull << 20));
}

struct PullCli {
  std::string ref, dir;
  bool quiet = false;
};

// Pulls with progress on stderr; the first file's path (what -m takes).
std::string pull_with_progress(const assist::ModelRef& ref, const std::string& dir, bool quiet) {
  assist::PullOptions opt{.dir = dir};
  std::unique_ptr<Progress> bar;
  std::string bar_file;
  opt.on_progress = [&](const assist::PullProgress& p) {
    if (quiet) return;
    const std::string label = p.parts > 1 ? fmt::format("pull {}/{}", p.part, p.parts) : std::string("pull");
    if (!bar || bar_file != p.file) {
      if (bar) bar->finish();
      bar = std::make_unique<Progress>(label, double(p.total), ProgressUnit::Bytes);
      bar_file = p.file;
    }
    bar->update(double(p.done), p.verifying ? "checking SHA-256" : p.file);
  };
  opt.on_note = [&](const std::string& note) {
    if (quiet) return;
    if (bar) bar->abandon(), bar.reset();
    std::fprintf(stderr, "moelsp pull: %s\n", note.c_str());
  };
  assist::Ticket ticket;
  assist::PullResult r;
  try {
    r = assist::pull(ref, opt, ticket);
  } catch (...) {
    if (bar) bar->abandon();  // no "done" above the error
    throw;
  }
  if (bar) bar->finish(r.paths.size() > 1 ? "all parts" : "");
  if (!quiet && r.downloaded == 0) std::fprintf(stderr, "moelsp pull: nothing to fetch\n");
  // What -m takes: a split model opens from its first part (the others lie beside it).
  return r.paths.front();
}

int run_pull(const PullCli& o) {
  try {
    const std::string path =
        pull_with_progress(assist::parse_model_ref(o.ref), o.dir.empty() ? assist::models_dir() : o.dir, o.quiet);
    std::puts(path.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moelsp pull: %s\n", e.what());
    return 1;
  }
}

int run_models(const std::string& dir_opt) {
  const std::string dir = dir_opt.empty() ? assist::models_dir() : dir_opt;
  const auto files = assist::cached_models(dir);
  uint64_t total = 0;
  for (const auto& f : files) {
    std::printf("%-72s %12s%s\n", f.rel.c_str(), human(f.size).c_str(),
                f.partial ? "  (partial: `moelsp pull` resumes it)" : "");
    total += f.size;
  }
  std::printf("%zu files, %s in %s\n", files.size(), human(total).c_str(), dir.c_str());
  return 0;
}

int run_rm(const std::string& what, const std::string& dir_opt) {
  const std::string dir = dir_opt.empty() ? assist::models_dir() : dir_opt;
  const auto removed = assist::remove_cached(dir, what);
  if (removed.empty()) {
    std::fprintf(stderr, "moelsp rm: nothing in %s is %s (`moelsp models` lists what is there)\n", dir.c_str(),
                 what.c_str());
    return 1;
  }
  for (const auto& r : removed) std::printf("removed %s\n", r.c_str());
  return 0;
}

}  // namespace

bool model_from_ref(std::string& model, const std::string& command) {
  try {
    const assist::ModelRef ref = assist::parse_model_ref(model);
    const std::string dir = assist::models_dir();
    if (const auto cached = assist::cached_paths(dir, ref); !cached.empty()) {
      model = cached.front();
      return true;
    }
    std::fprintf(stderr, "moelsp %s: %s is not in %s: pulling it\n", command.c_str(), model.c_str(), dir.c_str());
    model = pull_with_progress(ref, dir, false);
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moelsp %s: -m %s: %s\n", command.c_str(), model.c_str(), e.what());
    return false;
  }
}

void add_pull(CLI::App& app, std::vector<Command>& out) {
  auto po = std::make_shared<PullCli>();
  auto* p = app.add_subcommand(
      "pull",
      "Download a GGUF model from the Hugging Face hub into the cache (resumable, checked against its SHA-256)");
  p->add_option("ref", po->ref, "hf://owner/repo:QUANT, owner/repo:QUANT, hf://owner/repo/file.gguf or hf://owner/repo")
      ->required();
  p->add_option("--dir", po->dir,
                "The model cache (default: $MOELSP_MODELS_DIR, else $XDG_CACHE_HOME/moelsp/models, else "
                "~/.cache/moelsp/models)");
  p->add_flag("-q,--quiet", po->quiet, "No progress on stderr");
  p->footer(
      "Environment: HF_ENDPOINT (a mirror of the hub), HF_TOKEN (gated or private repositories), HTTPS_PROXY, "
      "HTTP_PROXY, NO_PROXY, SSL_CERT_FILE. Prints the path to give -m (a split model's first part; its other parts "
      "lie beside it).");
  out.push_back({p, [po] { return run_pull(*po); }});

  auto models_dir = std::make_shared<std::string>();
  auto suggest = std::make_shared<bool>(false);
  auto so = std::make_shared<SuggestOptions>();
  auto* m = app.add_subcommand("models", "List the models in the cache, with their sizes; --suggest: which to pull");
  m->add_option("--dir", *models_dir, "The model cache (default as for pull)");
  auto* sug =
      m->add_flag("--suggest", *suggest,
                  "The recommended MoE coding models and quantizations with their sizes, and whether each fits this "
                  "machine (the plan run on the file's header, read from the hub before any download) with the "
                  "context it would get and the expected decode speed. Without the hub: estimates from each model's "
                  "published configuration and file sizes");
  m->add_flag("--json", so->as_json, "With --suggest: the rows as a JSON array (what the editors' model pickers show)")
      ->needs(sug);
  m->add_flag("--offline", so->offline,
              "With --suggest: do not ask the hub; size each file from its model's published configuration")
      ->needs(sug);
  auto* machine =
      m->add_option("--machine", so->machines,
                    "With --suggest: plan for a described machine instead of this one: RAM[,VRAM] in GB, e.g. 32G or "
                    "64G,24G (three quarters of the RAM available, 8 cores, an NVMe disk, a CUDA build); repeat for a "
                    "column per machine")
          ->needs(sug);
  m->add_option("--bandwidth", so->bandwidth_gbs,
                "With --machine: its memory bandwidth in GB/s for the decode estimate")
      ->check(CLI::Range(1.0, 10000.0))
      ->default_val(60)
      ->needs(machine);
  m->add_flag("--markdown", so->markdown, "With --machine: the table as Markdown (the README's *Choose a model*)")
      ->needs(machine);
  out.push_back({m, [models_dir, suggest, so] { return *suggest ? models_suggest(*so) : run_models(*models_dir); }});

  auto rm_what = std::make_shared<std::string>(), rm_dir = std::make_shared<std::string>();
  auto* r = app.add_subcommand("rm", "Remove a model from the cache (every part of a split model)");
  r->add_option("model", *rm_what, "A reference as pull takes it, or a path as models lists it")->required();
  r->add_option("--dir", *rm_dir, "The model cache (default as for pull)");
  out.push_back({r, [rm_what, rm_dir] { return run_rm(*rm_what, *rm_dir); }});
}

}  // namespace moelsp::cli

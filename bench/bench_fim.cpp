// moelsp_bench_fim: how well a model's suggestions fit the cursor.
//
//   moelsp_bench_fim [-m MODEL.gguf] [--data DIR] [--lines 400] [--blocks 200] [--limit N]
//                    [--max-tokens 64] [--order model|psm|spm] [-t THREADS] [--json FILE] [--show N]
//
// Cases (bench/fim_cases.h) are cut from held-out source files — by default
// tests/data/fim/, CPython files the default model's training never saw —
// and each goes through the language server's own completion path
// (assist::Service: the context window around the cursor, the FIM prompt
// fitted to the model's context, greedy decoding with its stop rules, and the
// post-processing), exactly as a keystroke in an editor would, with the time
// budget lifted so the answer does not depend on the machine's speed. Any
// GGUF with FIM tokens can be measured (-m), so a real coding model can be
// compared with the embedded one. --order measures a FIM prompt order other
// than the model's own (completion.fimOrder in the language server).
//
// Prints exact match, first-line exact match and edit similarity for the
// single-line and multi-line cases and both together, and how many
// suggestions of several lines run past the end of the cursor's block
// (assist::block_end_at); --json writes them and every case's suggestion.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "assist/backend.h"
#include "assist/completion.h"
#include "assist/service.h"
#include "engine/default_model.h"
#include "engine/engine.h"
#include "engine/model.h"
#include "engine/plan.h"
#include "fim_cases.h"

using namespace moelsp;

namespace {

struct Totals {
  size_t n = 0, exact = 0, first_line = 0;
  double similarity = 0, ms = 0;
  void add(const bench::FimScore& s, double case_ms) {
    ++n;
    exact += s.exact;
    first_line += s.first_line_exact;
    similarity += s.edit_similarity;
    ms += case_ms;
  }
  nlohmann::json json() const {
    const double d = n ? double(n) : 1.0;
    return {{"cases", n},
            {"exactMatch", double(exact) / d},
            {"firstLineExactMatch", double(first_line) / d},
            {"editSimilarity", similarity / d},
            {"meanMs", ms / d}};
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Fill-in-the-middle benchmark through the language server's completion path"};
  std::string model, data = std::string(MOELSP_SOURCE_DIR) + "/tests/data/fim", json_out;
  size_t n_lines = 400, n_blocks = 200, limit = 0, show = 3;
  int threads = 0, max_tokens = 64;
  std::string order = "model";
  app.add_option("-m,--model", model, "GGUF model (default: the embedded model)");
  app.add_option("--data", data, "Directory of held-out .py files to cut the cases from")->capture_default_str();
  app.add_option("--lines", n_lines, "Single-line cases")->capture_default_str();
  app.add_option("--blocks", n_blocks, "Multi-line (block) cases")->capture_default_str();
  app.add_option("--limit", limit, "Run only the first N cases of each kind (a quick check; 0: all)");
  app.add_option("--max-tokens", max_tokens, "Tokens per suggestion (the language server's default)")
      ->capture_default_str();
  app.add_option("--order", order, "FIM prompt order: the model's own, prefix-suffix-middle or suffix-prefix-middle")
      ->check(CLI::IsMember({"model", "psm", "spm"}))
      ->capture_default_str();
  app.add_option("-t,--threads", threads, "Engine threads (0: physical cores)");
  app.add_option("--json", json_out, "Write the scores and every case's suggestion here");
  app.add_option("--show", show, "Print this many cases of each kind with their suggestion")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    if (model.empty()) model = default_model_path();
    const auto files = bench::read_fim_files(data);
    if (files.empty()) throw std::runtime_error(data + ": no .py files to cut cases from");
    std::vector<bench::FimCase> cases = bench::make_fim_cases(files, n_lines, n_blocks);
    if (limit > 0) {
      std::vector<bench::FimCase> kept;
      size_t lines = 0, blocks = 0;
      for (auto& c : cases)
        if ((c.multi_line ? blocks : lines)++ < limit) kept.push_back(std::move(c));
      cases = std::move(kept);
    }

    PlanRequest req;
    req.concurrency = 1;
    if (threads > 0) req.over.threads = threads;
    PlannedModel pm = load_planned(model, req);
    const SpecialTokens& sp = pm.model->tokenizer().special();
    const bool has_fim = sp.fim_pre != kNoToken && sp.fim_suf != kNoToken && sp.fim_mid != kNoToken;
    if (!has_fim)
      std::fprintf(stderr, "note: %s has no FIM tokens: its suggestions continue the prefix only\n", model.c_str());
    assist::Service service;
    service.set_backend(
        std::make_shared<assist::EngineBackend>(std::make_unique<Engine>(pm.model, pm.plan.engine_options())));

    Totals line_t, block_t, all_t;
    size_t multi_line = 0, past_block = 0;  // suggestions of several lines; those that leave the cursor's block
    nlohmann::json per_case = nlohmann::json::array();
    size_t shown_lines = 0, shown_blocks = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      const bench::FimCase& c = cases[i];
      assist::CompletionQuery q = assist::query_at(c.document, c.cursor);
      q.alternatives = 1;
      q.settings.max_tokens = max_tokens;
      q.settings.time_budget_ms = 600000;  // the answer, not the machine's speed
      q.settings.fim_order = order == "psm"   ? assist::FimOrder::kPsm
                             : order == "spm" ? assist::FimOrder::kSpm
                                              : assist::FimOrder::kModel;
      assist::Ticket ticket;
      const auto t0 = std::chrono::steady_clock::now();
      const assist::CompletionAnswer a = service.complete(q, ticket);
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (!a.error.empty()) throw std::runtime_error("case " + std::to_string(i) + ": " + a.error);
      const std::string suggestion = a.texts.empty() ? std::string() : a.texts.front();
      const bench::FimScore s = bench::score(suggestion, c.middle);
      (c.multi_line ? block_t : line_t).add(s, ms);
      all_t.add(s, ms);
      if (suggestion.find('\n') != std::string::npos) {
        ++multi_line;
        const assist::CompletionContext ctx = assist::make_context(c.document, c.cursor, c.cursor, c.document.size());
        past_block += assist::block_end_at(suggestion, ctx) != std::string::npos;
      }
      per_case.push_back({{"file", c.file},
                          {"kind", c.multi_line ? "block" : "line"},
                          {"cursor", c.cursor},
                          {"middle", c.middle},
                          {"suggestion", suggestion},
                          {"exact", s.exact},
                          {"firstLineExact", s.first_line_exact},
                          {"editSimilarity", s.edit_similarity}});
      size_t& shown = c.multi_line ? shown_blocks : shown_lines;
      if (shown < show) {
        ++shown;
        std::printf(
            "--- %s case in %s\nbefore the cursor: …%s\nwanted:    %s\nsuggested: %s\n",
            c.multi_line ? "multi-line" : "single-line", c.file.c_str(),
            c.document.substr(c.cursor - std::min<size_t>(c.cursor, 60), std::min<size_t>(c.cursor, 60)).c_str(),
            c.middle.c_str(), suggestion.c_str());
      }
      if ((i + 1) % 50 == 0) std::fprintf(stderr, "%zu/%zu cases\n", i + 1, cases.size());
    }
    const std::string used = order != "model" ? order : !has_fim ? "none" : sp.fim_spm ? "spm" : "psm";
    std::printf(
        "\nmodel: %s\nFIM benchmark: %zu cases from %zu held-out files in %s, %d tokens per suggestion, %s order\n",
        model.c_str(), cases.size(), files.size(), data.c_str(), max_tokens, used.c_str());
    std::printf("%-12s %6s %12s %18s %16s %10s\n", "kind", "cases", "exact match", "first-line exact",
                "edit similarity", "mean ms");
    for (const auto& [name, t] :
         {std::pair<const char*, const Totals&>{"single-line", line_t}, {"multi-line", block_t}, {"all", all_t}}) {
      const double d = t.n ? double(t.n) : 1.0;
      std::printf("%-12s %6zu %12.3f %18.3f %16.3f %10.1f\n", name, t.n, double(t.exact) / d, double(t.first_line) / d,
                  t.similarity / d, t.ms / d);
    }
    std::printf("suggestions of several lines: %zu, of which past the end of the cursor's block: %zu\n", multi_line,
                past_block);
    if (!json_out.empty()) {
      const nlohmann::json j = {{"model", model},
                                {"multiLineSuggestions", multi_line},
                                {"pastBlockEnd", past_block},
                                {"maxTokens", max_tokens},
                                {"order", used},
                                {"singleLine", line_t.json()},
                                {"multiLine", block_t.json()},
                                {"all", all_t.json()},
                                {"cases", per_case}};
      std::ofstream(json_out) << j.dump(1) << "\n";
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moelsp_bench_fim: %s\n", e.what());
    return 1;
  }
}

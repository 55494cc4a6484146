// generate, logits, perplexity and chat: the engine from the command line.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "assist/json_schema.h"
#include "cli_util.h"
#include "commands.h"
#include "engine/chat.h"
#include "engine/engine.h"
#include "engine/gguf.h"
#include "engine/grammar.h"
#include "engine/model.h"
#include "engine/perplexity.h"
#include "engine/plan.h"
#include "expert_report.h"
#include "progress.h"

namespace moelsp::cli {
namespace {

std::shared_ptr<Model> load_model(const ModelOptions& o) {
  const LoadProgress bar(o.model, o.quiet);
  return std::shared_ptr<Model>(Model::load(o.model, {.threads = o.threads}));
}

// The automatic plan for this machine, with the user's config file and then
// the command's flags as overrides.
PlannedModel load_planned_model(const ModelOptions& o) {
  PlanRequest req;
  req.concurrency = 1;
  assist::Settings s = assist::read_config_files();
  assist::Settings flags;
  flags.plan = o.plan;
  s.merge_from(flags);
  req.over = s.plan;
  if (o.threads > 0) req.over.threads = o.threads;
  req.over.n_ctx = o.ctx;
  req.over.kv_type = o.kv_type;
  const LoadProgress bar(o.model, o.quiet);
  return load_planned(o.model, req);
}

uint64_t pick_seed(int64_t seed) { return seed >= 0 ? uint64_t(seed) : std::random_device{}(); }

void print_timings(const Result& r) {
  const auto& t = r.timings;
  std::fprintf(stderr,
               "\nprompt: %d tokens (%d reused) in %.1f ms, %.2f tokens/s | generated: %d tokens in %.1f ms, %.2f "
               "tokens/s | finish: %s%s%s\n",
               t.n_prompt, t.n_prompt_cached, t.prompt_ms, t.prompt_tps(), t.n_generated, t.generate_ms,
               t.generate_tps(), to_string(r.reason), r.error.empty() ? "" : ": ", r.error.c_str());
}

// --grammar, --grammar-file, --json-schema, --json-schema-file (at most one).
std::shared_ptr<const Grammar> output_grammar(const GenerateOptions& o) {
  if (!o.grammar.empty()) return compile_gbnf(o.grammar);
  if (!o.grammar_file.empty()) return compile_gbnf(read_text(o.grammar_file));
  const std::string schema = o.json_schema_file.empty() ? o.json_schema : read_text(o.json_schema_file);
  if (schema.empty()) return nullptr;
  return compile_gbnf(assist::json_schema_to_gbnf(schema));
}

}  // namespace

int generate(const GenerateOptions& o) {
  try {
    const PlannedModel pm = load_planned_model(o.m);
    auto model = pm.model;
    Engine engine(model, pm.plan.engine_options());
    Request req;
    if (!o.tokens.empty()) req.prompt_tokens = parse_ids(o.tokens, model->tokenizer().n_vocab());
    else req.prompt = o.file.empty() ? o.prompt : read_text(o.file);
    req.max_tokens = o.n_predict;
    req.stop = o.stop;
    req.ignore_eos = o.ignore_eos;
    SamplingParams& s = req.sampling;
    s.temperature = o.greedy ? 0.0f : o.temp;
    s.top_k = o.top_k;
    s.top_p = o.top_p;
    s.min_p = o.min_p;
    s.repeat_penalty = o.repeat_penalty;
    s.presence_penalty = o.presence_penalty;
    s.frequency_penalty = o.frequency_penalty;
    s.seed = pick_seed(o.seed);
    req.constraint.grammar = output_grammar(o);
    Callbacks cb;
    if (!o.ids)
      cb.on_token = [](TokenId, const std::string& text) {
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
      };
    const Result r = engine.submit(std::move(req), std::move(cb)).wait();
    if (o.ids) {
      std::puts(join_ids(r.tokens).c_str());
    } else {
      std::fputc('\n', stdout);
    }
    print_timings(r);
    return r.reason == FinishReason::Error ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moelsp generate: %s\n", e.what());
    return 1;
  }
}

int logits(const LogitsOptions& o) {
  try {
    auto model = load_model(o.m);
    const auto ids = parse_ids(o.tokens, model->tokenizer().n_vocab());
    if (ids.empty()) throw std::runtime_error("no tokens given (--tokens \"ID ID ...\")");
    const size_t nv = size_t(model->config().n_vocab);
    auto cache = model->new_cache(int(ids.size()), kv_type_from_name(o.m.kv_type));
    std::vector<float> out(ids.size() * nv);
    if (o.incremental)
      for (size_t i = 0; i < ids.size(); ++i) model->forward({&ids[i], 1}, *cache, out.data() + i * nv, false);
    else model->forward(ids, *cache, out.data(), true);
    std::ofstream f(o.out, std::ios::binary | std::ios::trunc);
    if (!f) throw std::runtime_error(fmt::format("{}: cannot open for writing", o.out));
    f.write(reinterpret_cast<const char*>(out.data()), std::streamsize(out.size() * sizeof(float)));
    if (!f) throw std::runtime_error(fmt::format("{}: write failed", o.out));
    std::fprintf(stderr, "wrote %zu rows of %zu float32 logits to %s\n", ids.size(), nv, o.out.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moelsp logits: %s\n", e.what());
    return 1;
  }
}

namespace {

// The text's perplexity, windows counted on a progress bar with the running figure.
PerplexityResult run_perplexity(Model& model, const PerplexityOptions& o) {
  // Beyond the training context the positions are ones the model never saw:
  // the number would be meaningless, so it is refused.
  if (const int train = model.config().n_ctx_train; train > 0 && o.ctx > train)
    throw std::runtime_error(
        fmt::format("-c {} is beyond the model's training context of {} tokens (allowed: 2..{})", o.ctx, train, train));
  const auto tokens = model.tokenizer().encode(read_text(o.file));
  const PerplexityParams p{
      .ctx = o.ctx, .stride = o.stride, .max_windows = o.max_chunks, .kv_type = kv_type_from_name(o.m.kv_type)};
  Progress bar("perplexity", 0, ProgressUnit::Count, {.quiet = o.m.quiet, .unit_name = "windows"});
  const auto r = moelsp::perplexity(model, tokens, p, [&](const PerplexityResult& run) {
    bar.set_total(run.total_windows);
    bar.update(run.windows, fmt::format("ppl {:.4f}", run.perplexity()));
  });
  bar.finish(fmt::format("ppl {:.4f}", r.perplexity()));
  return r;
}

void print_perplexity(const PerplexityResult& r) {
  std::printf("perplexity: %.4f over %lld tokens (%d windows of %d, stride %d); %.4f nats/token\n", r.perplexity(),
              (long long)r.scored, r.windows, r.ctx, r.stride, r.nats_per_token());
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f || !(f << text) || !f.flush()) throw std::runtime_error(fmt::format("{}: cannot write", path));
}

}  // namespace

int perplexity(const PerplexityOptions& o) {
  try {
    auto model = load_model(o.m);
    print_perplexity(run_perplexity(*model, o));
    // Routing on this text: each MoE layer's share of routed slots per expert.
    const auto& stats = model->moe_stats();
    for (size_t il = 0; il < stats.size(); ++il) {
      int64_t total = 0;
      for (int64_t t : stats[il].expert_tokens) total += t;
      if (total == 0) continue;
      std::string row;
      for (int64_t t : stats[il].expert_tokens) row += fmt::format(" {:.3f}", double(t) / double(total));
      std::fprintf(stderr, "expert usage, layer %zu:%s\n", il, row.c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moelsp perplexity: %s\n", e.what());
    return 1;
  }
}

int experts(const ExpertsOptions& o) {
  try {
    auto model = load_model(o.px.m);
    if (model->config().n_expert <= 0)
      throw std::runtime_error(
          fmt::format("{} has no routed experts (architecture {})", model->file().path(), model->config().arch));
    const PerplexityResult r = run_perplexity(*model, o.px);
    const auto name = [](const std::string& path) { return std::filesystem::path(path).filename().string(); };
    const ExpertReport rep = expert_report(*model, name(model->file().path()), name(o.px.file));
    print_perplexity(r);
    std::printf("%-8s %8s %9s %5s %17s\n", "layer", "entropy", "max/mean", "dead", "thread imbalance");
    for (const LayerUsage& u : rep.layers)
      std::printf("%-8d %8.3f %9.2f %5d %17.3f\n", u.layer, u.entropy, u.max_over_mean(), u.dead(), u.thread_imbalance);
    for (const auto& [path, text] :
         {std::pair{o.svg, heatmap_svg(rep)}, std::pair{o.csv, report_csv(rep)}, std::pair{o.json, report_json(rep)}})
      if (!path.empty()) {
        write_file(path, text);
        std::printf("wrote %s\n", path.c_str());
      }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moelsp experts: %s\n", e.what());
    return 1;
  }
}

int chat(const ChatOptions& o) {
  try {
    const PlannedModel pm = load_planned_model(o.m);
    auto model = pm.model;
    const ChatTemplate tmpl = ChatTemplate::for_model(model->file(), model->tokenizer(), o.chat_template);
    Engine engine(model, pm.plan.engine_options());
    std::vector<ChatMessage> history;
    if (!o.system.empty()) history.push_back({"system", o.system});
    std::fprintf(stderr, "moelsp chat (%s). /reset clears the conversation, /exit or Ctrl-D quits.\n",
                 tmpl.describe().c_str());
    uint64_t seed = pick_seed(o.seed);
    for (std::string line;;) {
      std::fprintf(stderr, "\n> ");
      if (!std::getline(std::cin, line)) break;
      if (line == "/exit") break;
      if (line == "/reset") {
        history.resize(o.system.empty() ? 0 : 1);
        continue;
      }
      if (line.empty()) continue;
      history.push_back({"user", line});
      Request req;
      try {
        req.prompt = tmpl.apply(history);
      } catch (const ChatTemplateError& e) {  // e.g. the template refuses this conversation
        std::fprintf(stderr, "error: %s\n", e.what());
        history.pop_back();
        continue;
      }
      req.max_tokens = o.n_predict;
      req.sampling.temperature = o.temp;
      req.sampling.repeat_penalty = 1.1f;
      req.sampling.seed = seed++;
      Callbacks cb;
      cb.on_token = [](TokenId, const std::string& text) {
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
      };
      const Result r = engine.submit(std::move(req), std::move(cb)).wait();
      std::fputc('\n', stdout);
      if (r.reason == FinishReason::Error) std::fprintf(stderr, "error: %s\n", r.error.c_str());
      history.push_back({"assistant", r.text});
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moelsp chat: %s\n", e.what());
    return 1;
  }
}

}  // namespace moelsp::cli

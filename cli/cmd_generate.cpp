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
#include "options.h"
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

namespace {

void add_generate_one(CLI::App& app, std::vector<Command>& out) {
  auto g = std::make_shared<GenerateOptions>();
  auto* c = app.add_subcommand("generate", "Generate text from a prompt, streamed to stdout (timings to stderr)");
  add_model_options(c, g->m);
  auto* p = c->add_option("-p,--prompt", g->prompt, "Prompt text (BOS added as the model asks; special tokens parsed)");
  auto* f = c->add_option("-f,--file", g->file, "Read the prompt from a file")->check(kFile);
  auto* t = c->add_option("--tokens", g->tokens, "Prompt as token ids (\"ID ID ...\"), used as given");
  p->excludes(f)->excludes(t);
  f->excludes(t);
  c->add_option("-n,--n-predict", g->n_predict, "Tokens to generate at most")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  c->add_option("--temp", g->temp, "Temperature (0: greedy)")->capture_default_str()->check(within(0, 10));
  c->add_option("--top-k", g->top_k, "Top-k (0: off)")->capture_default_str()->check(CLI::Range(0, 1 << 20));
  c->add_option("--top-p", g->top_p, "Top-p (1: off)")->capture_default_str()->check(within(1e-6, 1));
  c->add_option("--min-p", g->min_p, "Min-p (0: off)")->capture_default_str()->check(within(0, 1));
  c->add_option("--repeat-penalty", g->repeat_penalty, "Repetition penalty (1: off)")
      ->capture_default_str()
      ->check(within(0.01, 10));
  c->add_option("--presence-penalty", g->presence_penalty, "Presence penalty")
      ->capture_default_str()
      ->check(within(-10, 10));
  c->add_option("--frequency-penalty", g->frequency_penalty, "Frequency penalty")
      ->capture_default_str()
      ->check(within(-10, 10));
  c->add_option("-s,--seed", g->seed, "Random seed (-1: random)")->capture_default_str();
  c->add_flag("--greedy", g->greedy, "Greedy decoding (same as --temp 0)");
  c->add_flag("--ids", g->ids, "Print the generated token ids on one line instead of the text");
  c->add_flag("--ignore-eos", g->ignore_eos, "Do not stop at end-of-generation tokens");
  c->add_option("--stop", g->stop, "Stop before this string (repeatable)");
  auto* gg = c->add_option("--grammar", g->grammar, "Constrain the output to this GBNF grammar (llama.cpp's syntax)");
  auto* ggf = c->add_option("--grammar-file", g->grammar_file, "Constrain the output to the GBNF grammar in FILE")
                  ->check(kFile);
  auto* gj = c->add_option("-j,--json-schema", g->json_schema,
                           "Constrain the output to JSON of this schema (e.g. '{\"type\": \"object\"}')");
  auto* gjf =
      c->add_option("--json-schema-file", g->json_schema_file, "Constrain the output to JSON of the schema in FILE")
          ->check(kFile);
  for (auto* a : {gg, ggf, gj, gjf})
    for (auto* b : {gg, ggf, gj, gjf})
      if (a != b) a->excludes(b);
  auto flags = std::make_shared<SettingFlags>(c, assist::kPlanFlag);
  out.push_back({c, [g, c, p, f, t, flags] {
                   assist::Settings s;
                   if (!apply_flags(*flags, s) || !default_model(g->m.model, c)) return 2;
                   g->m.plan = s.plan;
                   if (p->count() + f->count() + t->count() == 0) {
                     std::fprintf(stderr,
                                  "moelsp generate: give the prompt with -p TEXT, -f FILE or --tokens \"ID ...\"\n");
                     return 2;
                   }
                   return generate(*g);
                 }});
}

void add_logits(CLI::App& app, std::vector<Command>& out) {
  auto lg = std::make_shared<LogitsOptions>();
  lg->m.kv_type = "f32";  // for comparisons with other implementations: exact attention inputs
  auto* c = app.add_subcommand("logits", "Write the logits of every position of a token sequence as raw float32 rows");
  add_model_options(c, lg->m);
  c->add_option("--tokens", lg->tokens, "Token ids (\"ID ID ...\")")->required();
  c->add_option("-o,--out", lg->out, "Output file (n_tokens rows of n_vocab little-endian float32)")->required();
  c->add_flag("--incremental", lg->incremental, "Run one token at a time through the KV cache instead of one prefill");
  out.push_back({c, [lg, c] { return default_model(lg->m.model, c) ? logits(*lg) : 2; }});
}

// perplexity and experts read a text in windows: -m, -t, -f, -c, --chunks, -q.
void add_text_options(CLI::App* c, PerplexityOptions& px, const char* file_help, const char* window_help) {
  c->add_option("-m,--model", px.m.model, kModelHelp);
  c->add_option("-t,--threads", px.m.threads, kThreadsHelp);
  c->add_option("-f,--file", px.file, file_help)->required()->check(kFile);
  c->add_option("-c,--ctx-size", px.ctx, window_help)->capture_default_str()->check(CLI::Range(2, 1 << 22));
  c->add_option("--chunks", px.max_chunks, "Stop after this many windows (0: whole file)")
      ->check(CLI::Range(0, 1 << 30));
  c->add_flag("-q,--quiet", px.m.quiet, kQuietHelp);
}

void add_perplexity(CLI::App& app, std::vector<Command>& out) {
  auto px = std::make_shared<PerplexityOptions>();
  auto* c = app.add_subcommand("perplexity", "Perplexity of a model on a text file");
  add_text_options(c, *px, "Text file", "Window in tokens (at most the model's training context)");
  c->add_option("--stride", px->stride, "Tokens scored per window after the first (default: ctx/2)")
      ->check(CLI::Range(0, 1 << 22));
  c->add_option("--kv-type", px->m.kv_type,
                "KV cache type: f16, bf16, f32 or q8_0 (what each costs in quality: compare their perplexities)")
      ->capture_default_str()
      ->check(CLI::IsMember({"f16", "bf16", "f32", "q8_0"}));
  out.push_back({c, [px, c] { return default_model(px->m.model, c) ? perplexity(*px) : 2; }});
}

void add_experts(CLI::App& app, std::vector<Command>& out) {
  auto ex = std::make_shared<ExpertsOptions>();
  auto* c = app.add_subcommand("experts",
                               "Run a text through a MoE model and draw each layer's expert usage: an SVG heatmap "
                               "(layers × experts), CSV, JSON");
  add_text_options(c, ex->px, "Text file to run", "Window in tokens");
  c->add_option("--svg", ex->svg, "Heatmap file (empty: none)")->capture_default_str();
  c->add_option("--csv", ex->csv, "The counts as CSV: layer,expert,tokens,share");
  c->add_option("--json", ex->json, "The counts and per-layer figures as JSON");
  out.push_back({c, [ex, c] { return default_model(ex->px.m.model, c) ? experts(*ex) : 2; }});
}

void add_chat(CLI::App& app, std::vector<Command>& out) {
  auto ch = std::make_shared<ChatOptions>();
  auto* c = app.add_subcommand("chat", "Interactive chat in the terminal, using the model's chat template");
  add_model_options(c, ch->m);
  c->add_option("--chat-template", ch->chat_template,
                "Instead of the model's own Jinja template: a built-in one (chatml, deepseek2, deepseek3, mistral, "
                "llama2, chatglm4) or a Jinja file, FILE.jinja");
  c->add_option("--system", ch->system, "System message");
  c->add_option("-n,--n-predict", ch->n_predict, "Tokens per answer at most")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  c->add_option("--temp", ch->temp, "Temperature")->capture_default_str()->check(within(0, 10));
  c->add_option("-s,--seed", ch->seed, "Random seed (-1: random)")->capture_default_str();
  auto flags = std::make_shared<SettingFlags>(c, assist::kPlanFlag);
  out.push_back({c, [ch, c, flags] {
                   assist::Settings s;
                   if (!apply_flags(*flags, s) || !default_model(ch->m.model, c)) return 2;
                   ch->m.plan = s.plan;
                   return chat(*ch);
                 }});
}

}  // namespace

void add_generate(CLI::App& app, std::vector<Command>& out) {
  add_generate_one(app, out);
  add_logits(app, out);
  add_perplexity(app, out);
  add_experts(app, out);
  add_chat(app, out);
}

}  // namespace moelsp::cli

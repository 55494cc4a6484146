// generate, logits, perplexity and chat: the engine from the command line.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "cli_util.h"
#include "commands.h"
#include "engine/chat.h"
#include "engine/engine.h"
#include "engine/gguf.h"
#include "engine/model.h"

namespace moelsp::cli {
namespace {

std::shared_ptr<Model> load_model(const ModelOptions& o) {
  return std::shared_ptr<Model>(Model::load(o.model, {.threads = o.threads}));
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

}  // namespace

int generate(const GenerateOptions& o) {
  try {
    auto model = load_model(o.m);
    Engine engine(model, {.n_ctx = o.m.ctx});
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
    auto cache = model->new_cache(int(ids.size()));
    std::vector<float> out(ids.size() * nv);
    if (o.incremental)
      for (size_t i = 0; i < ids.size(); ++i) model->forward({&ids[i], 1}, *cache, out.data() + i * nv, false);
    else
      model->forward(ids, *cache, out.data(), true);
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

int perplexity(const PerplexityOptions& o) {
  try {
    auto model = load_model(o.m);
    const Tokenizer& tok = model->tokenizer();
    const auto tokens = tok.encode(read_text(o.file));
    const int ctx = o.ctx, stride = o.stride > 0 ? std::min(o.stride, ctx) : std::max(1, ctx / 2);
    const bool bos = tok.special().add_bos && tok.special().bos != kNoToken;
    const int window = ctx - (bos ? 1 : 0);  // text tokens per window
    if (window < 2) throw std::runtime_error("context too small");
    if (int(tokens.size()) < 2) throw std::runtime_error("the text has fewer than 2 tokens");
    const size_t nv = size_t(model->config().n_vocab);
    double nll = 0;
    int64_t scored = 0;
    int chunks = 0;
    // Each window predicts its tokens from the ones before; after the first,
    // only the last `stride` predictions count, so every token is scored once
    // with at least ctx - stride tokens of context.
    for (int64_t start = 0;; start += stride) {
      const int64_t end = std::min<int64_t>(start + window, int64_t(tokens.size()));
      std::vector<TokenId> in;
      if (bos) in.push_back(tok.special().bos);
      in.insert(in.end(), tokens.begin() + start, tokens.begin() + end);
      auto cache = model->new_cache(int(in.size()));
      std::vector<float> lg(in.size() * nv);
      model->forward(in, *cache, lg.data(), true);
      const int off = bos ? 1 : 0;
      const int64_t first = start == 0 ? 1 : std::max<int64_t>(1, end - start - stride);
      for (int64_t i = first; i < end - start; ++i) {
        const float* row = lg.data() + size_t(i - 1 + off) * nv;
        const float mx = *std::max_element(row, row + nv);
        double sum = 0;
        for (size_t v = 0; v < nv; ++v) sum += std::exp(double(row[v] - mx));
        nll += std::log(sum) + mx - row[tokens[size_t(start + i)]];
        ++scored;
      }
      ++chunks;
      std::fprintf(stderr, "[%d] %.4f\n", chunks, std::exp(nll / double(scored)));
      if (end == int64_t(tokens.size()) || (o.max_chunks > 0 && chunks >= o.max_chunks)) break;
    }
    std::printf("perplexity: %.4f over %lld tokens (%d windows of %d, stride %d); %.4f nats/token\n",
                std::exp(nll / double(scored)), (long long)scored, chunks, ctx, stride, nll / double(scored));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moelsp perplexity: %s\n", e.what());
    return 1;
  }
}

int chat(const ChatOptions& o) {
  try {
    auto model = load_model(o.m);
    const std::string jinja = model->file().get_or<std::string>("tokenizer.chat_template", "");
    const std::string tmpl = resolve_chat_template(jinja, o.chat_template);
    Engine engine(model, {.n_ctx = o.m.ctx});
    std::vector<ChatMessage> history;
    if (!o.system.empty()) history.push_back({"system", o.system});
    std::fprintf(stderr, "moelsp chat (%s template). /reset clears the conversation, /exit or Ctrl-D quits.\n",
                 tmpl.c_str());
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
      req.prompt = apply_chat_template(tmpl, history);
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

// The embedded default model (models/moelsp-default.gguf, trained by
// tools/train-default-model) against what its trainer recorded: the same
// tokens as SentencePiece itself, the held-out perplexity PyTorch computed
// within 1% (it proves MLA, routing and the tokenizer agree between the two
// implementations), every expert in use, and FIM and chat tokens in place.
#include <cmath>
#include <sstream>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "engine/default_model.h"
#include "engine/engine.h"
#include "engine/gguf.h"
#include "engine/model.h"
#include "engine/perplexity.h"
#include "test_data.h"

using namespace moelsp;
using nlohmann::json;

namespace {

const std::string kModel = std::string(MOELSP_MODELS_DIR) + "/moelsp-default.gguf";

std::shared_ptr<Model> model() {
  static std::shared_ptr<Model> m = Model::load(test::data_path_abs(kModel), {.threads = 2});
  return m;
}

std::vector<TokenId> read_ids(const std::string& path) {
  std::istringstream in(test::read_file(path));
  std::vector<TokenId> ids;
  for (long v; in >> v;) ids.push_back(TokenId(v));
  return ids;
}

}  // namespace

TEST_CASE("default model: a deepseek2 MoE with MLA, FIM and chat tokens") {
  const ModelConfig& c = model()->config();
  CHECK(c.arch == "deepseek2");
  CHECK(c.kv_lora_rank > 0);  // MLA: the cache holds the latent
  CHECK(c.qk_rope > 0);       // with a decoupled RoPE key
  CHECK(c.n_expert >= 8);
  CHECK(c.n_expert_used == 2);
  CHECK(c.n_expert_shared == 1);
  CHECK(c.n_layer_dense_lead == 1);
  const SpecialTokens& s = model()->tokenizer().special();
  CHECK(s.fim_pre != kNoToken);
  CHECK(s.fim_suf != kNoToken);
  CHECK(s.fim_mid != kNoToken);
  CHECK(s.eot != kNoToken);
  CHECK(!model()->file().get_or<std::string>("tokenizer.chat_template", "").empty());
  CHECK(std::filesystem::file_size(kModel) <= 40u * 1024 * 1024);
}

TEST_CASE("default model: the engine's tokens are SentencePiece's, whitespace kept") {
  const std::string text = test::read_file(test::data_path("default-model/slice.txt"));
  const auto ids = model()->tokenizer().encode(text);
  CHECK(ids == read_ids(test::data_path("default-model/slice.ids")));
  CHECK(model()->tokenizer().decode(ids) == text);
  const std::string code = "\tif x:\n        return  [a,  b]\n\n\n";
  CHECK(model()->tokenizer().decode(model()->tokenizer().encode(code)) == code);
}

TEST_CASE("default model: held-out perplexity matches the trainer's, every expert used") {
  const json want = json::parse(test::read_file(test::data_path("default-model/expected.json")));
  const auto ids = model()->tokenizer().encode(test::read_file(test::data_path("default-model/slice.txt")));
  model()->reset_moe_stats();
  const auto r = perplexity(*model(), ids, {.ctx = want["ctx"], .stride = want["stride"]});
  const double ref = want["slice"]["perplexity"];
  INFO("engine " << r.perplexity() << " vs trainer " << ref << " over " << r.scored << " tokens");
  CHECK(r.scored == want["slice"]["scored"].get<int64_t>());
  CHECK(std::fabs(r.perplexity() / ref - 1.0) < 0.01);
  WARN("default model held-out slice: engine perplexity " << r.perplexity() << ", trainer " << ref);
  // Routing: no expert of any MoE layer starves (uniform would be 1/n_expert of the slots).
  const ModelConfig& c = model()->config();
  for (int il = c.n_layer_dense_lead; il < c.n_layer; ++il) {
    const auto& tokens = model()->moe_stats()[size_t(il)].expert_tokens;
    int64_t total = 0;
    for (int64_t t : tokens) total += t;
    REQUIRE(total > 0);
    for (size_t e = 0; e < tokens.size(); ++e) {
      INFO("layer " << il << " expert " << e << ": " << tokens[e] << " of " << total);
      CHECK(double(tokens[e]) / double(total) > 0.25 / double(c.n_expert));
    }
  }
}

TEST_CASE("default model: found without configuration") {
  // The source tree's models/ is where default_model_path() looks first (after $MOELSP_MODEL).
  if (const char* env = std::getenv("MOELSP_MODEL"); env && *env) SUCCEED("MOELSP_MODEL is set: " << env);
  else CHECK(default_model_path() == kModel);
}

TEST_CASE("default model: it declares suffix-prefix-middle FIM prompts, the order it was measured best with") {
  CHECK(model()->tokenizer().special().fim_spm);
}

// Token healing (Request::heal) on trained weights: the prompt without its
// last, partial word; the first token must begin with that word's start,
// which the answer does not repeat.
TEST_CASE("default model: token healing continues the word the prompt ended in") {
  const Tokenizer& tok = model()->tokenizer();
  Engine engine(model(), {.n_ctx = 256});
  const std::string text = "class Parser:\n    def feed(self, data):\n        self.buf = data\n        return se";
  std::vector<TokenId> ids = tok.encode(text);
  const std::string heal = tok.piece(ids.back());
  REQUIRE(text.size() > heal.size());
  REQUIRE(text.compare(text.size() - heal.size(), heal.size(), heal) == 0);
  ids.pop_back();
  const auto run = [&](const std::string& h) {
    Request req;
    req.prompt_tokens = ids;
    req.heal = h;
    req.sampling = SamplingParams::greedy();
    req.max_tokens = 6;
    req.ignore_eos = true;
    std::string streamed;
    Result r = engine.submit(req, {.on_token = [&](TokenId, const std::string& t) { streamed += t; }}).wait();
    CHECK(streamed == r.text);
    return r;
  };
  const Result healed = run(heal);
  REQUIRE(!healed.tokens.empty());
  const std::string first = tok.piece(healed.tokens.front());
  INFO("healed with '" << heal << "': first token '" << first << "', answer '" << healed.text << "'");
  CHECK(first.compare(0, heal.size(), heal) == 0);
  const std::string all = tok.decode(healed.tokens);
  REQUIRE(all.size() >= heal.size());
  CHECK(healed.text == all.substr(heal.size()));
  // A text no token begins with is ignored: plain decoding of the same prompt.
  const Result plain = run(""), ignored = run("\x01\x02\x03");
  CHECK(ignored.tokens == plain.tokens);
  CHECK(ignored.text == plain.text);
}

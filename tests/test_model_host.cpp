// assist::ModelHost, the model both front ends serve: a background load that
// ends in its hooks, the status and metrics it reports, unload, and the
// failures (a missing file, a bad remote URL) as states rather than throws.
#include <future>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "assist/model_host.h"
#include "assist/service.h"
#include "test_data.h"

using namespace moelsp;
using json = nlohmann::json;

namespace {
struct Watched {
  assist::Service service;
  std::promise<assist::ModelHost::Snapshot> done;
  std::vector<assist::ModelPhase> seen_loading;
  assist::ModelHost host{service,
                         {.loading = [this](const auto& st) { seen_loading.push_back(st.phase); },
                          .done = [this](const auto& st) { done.set_value(st); }}};
  assist::ModelHost::Snapshot wait() { return done.get_future().get(); }
};
}  // namespace

TEST_CASE("model host: a GGUF loads in the background, then the service has it and the status describes it") {
  Watched w;
  assist::Settings s;
  s.model = test::data_path("reference/qwen3moe-ref.gguf");
  s.plan.threads = 1;
  w.host.load(s);
  CHECK(w.seen_loading == std::vector{assist::ModelPhase::Loading});
  const auto st = w.wait();
  REQUIRE(st.phase == assist::ModelPhase::Ready);
  CHECK(st.message == "model loaded: " + *s.model);
  CHECK(st.n_ctx > 0);
  CHECK_FALSE(st.plan_text.empty());
  CHECK(w.service.backend() != nullptr);
  CHECK_FALSE(w.host.is_remote());
  CHECK(w.host.loaded().model == s.model);
  const json j = w.host.status();
  for (const char* key : {"model", "plan", "hardware", "experts", "kvCache", "scheduler"}) {
    INFO(key);
    CHECK(j.contains(key));
  }
  CHECK(j["plan"]["kvCache"]["bytes"].get<int64_t>() > 0);
  CHECK_THAT(w.host.metrics_text(), Catch::Contains("moelsp_kv_blocks_free"));
  w.host.unload();
  CHECK(w.service.backend() == nullptr);
  CHECK(w.host.status() == json::object());
  CHECK(w.host.metrics_text().empty());
}

TEST_CASE("model host: a file that is not there is the error state naming it, and a later load still works") {
  Watched w;
  assist::Settings s;
  s.model = "/no/such/model.gguf";
  w.host.load(s);
  const auto st = w.wait();
  CHECK(st.phase == assist::ModelPhase::Error);
  CHECK_THAT(st.message, Catch::Contains("/no/such/model.gguf"));
  CHECK(w.service.backend() == nullptr);
  CHECK(w.host.phase() == assist::ModelPhase::Error);
}

TEST_CASE("model host: backend.url sets up a remote backend at once, and a bad URL is the error state") {
  Watched w;
  assist::Settings s;
  s.backend_url = "http://127.0.0.1:9/v1";
  w.host.load(s);
  const auto st = w.wait();  // (done ran inside load)
  CHECK(w.seen_loading.empty());
  REQUIRE(st.phase == assist::ModelPhase::Ready);
  CHECK(w.host.is_remote());
  CHECK(st.backend_url == "http://127.0.0.1:9/v1");
  const json j = w.host.status();
  CHECK(j["backend"]["url"] == "http://127.0.0.1:9/v1");

  Watched bad;
  s.backend_url = "ftp://example.com";
  bad.host.load(s);
  const auto err = bad.wait();
  CHECK(err.phase == assist::ModelPhase::Error);
  CHECK_FALSE(err.message.empty());
  CHECK(bad.service.backend() == nullptr);
}

TEST_CASE("model host: fail() is the error state without a load") {
  Watched w;
  w.host.fail("nothing to load");
  CHECK(w.host.phase() == assist::ModelPhase::Error);
  CHECK(w.host.snapshot().message == "nothing to load");
}

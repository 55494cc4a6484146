// The CUDA entry points in the moelsp binary: forwarders to the plugin
// (plugin.h), loaded on first use. Where it is looked for, first found wins:
//   $MOELSP_CUDA_PLUGIN (a path; "none" turns the backend off),
//   <the executable's dir>/../lib/moelsp/libmoelsp_cuda.so (installed),
//   the build tree's copy (MOELSP_CUDA_PLUGIN_BUILD, running from the build).
// When none loads (no libcudart / libcublas on this machine: dlerror says
// which), every entry point fails with that reason and devices() is empty:
// the plan then runs on the CPU and says why.
#include <dlfcn.h>
#include <unistd.h>

#include <array>
#include <filesystem>

#include "plugin.h"

namespace moelsp::kernels::cuda {

namespace {

struct Loaded {
  const plugin::Api* api = nullptr;
  std::string error;  // why api is null
};

// (util/install_path.h's beside_executable, written again: kernels/ is the
// bottom floor and includes nothing of ours.)
std::string exe_relative_plugin() {
  std::array<char, 4096> buf{};
  const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) return {};
  return (std::filesystem::path(std::string(buf.data(), size_t(n))).parent_path() / ".." / "lib" / "moelsp" /
          plugin::kFile)
      .lexically_normal()
      .string();
}

// dlopen's words for each path tried, joined: the user sees every reason.
Loaded open_plugin() {
  std::vector<std::string> paths;
  if (const char* env = std::getenv("MOELSP_CUDA_PLUGIN"); env && *env) {
    if (std::string(env) == "none") return {nullptr, "the CUDA backend is off (MOELSP_CUDA_PLUGIN=none)"};
    std::error_code ec;
    if (!std::filesystem::exists(env, ec))
      return {nullptr,
              std::string("the CUDA backend could not be loaded: MOELSP_CUDA_PLUGIN=") + env + ": no such file"};
    paths.push_back(env);
  } else {
    paths.push_back(exe_relative_plugin());
#ifdef MOELSP_CUDA_PLUGIN_BUILD
    paths.push_back(MOELSP_CUDA_PLUGIN_BUILD);
#endif
  }
  std::string why;
  for (const std::string& p : paths) {
    std::error_code ec;
    if (p.empty() || !std::filesystem::exists(p, ec)) continue;
    void* h = dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      why += std::string(why.empty() ? "" : "; ") + dlerror();
      continue;
    }
    const auto entry = reinterpret_cast<plugin::EntryFn>(dlsym(h, plugin::kEntry));
    const plugin::Api* api = entry ? entry() : nullptr;
    if (api && api->abi == plugin::kAbi && api->size == sizeof(plugin::Api)) return {api, {}};
    why += std::string(why.empty() ? "" : "; ") + p + ": not a moelsp CUDA plugin of this build";
    dlclose(h);
  }
  if (why.empty()) why = std::string(plugin::kFile) + " is not installed beside moelsp (lib/moelsp/)";
  return {nullptr, "the CUDA backend could not be loaded: " + why};
}

const Loaded& loaded() {
  static const Loaded l = open_plugin();
  return l;
}

// The plugin's table, or null with *error set.
const plugin::Api* api(std::string* error) {
  const Loaded& l = loaded();
  if (!l.api && error) *error = l.error;
  return l.api;
}

}  // namespace

bool compiled_in() { return true; }

std::vector<DeviceInfo> devices(std::string* error) {
  const plugin::Api* a = api(error);
  return a ? a->devices(error) : std::vector<DeviceInfo>{};
}
std::vector<DeviceInfo> devices() { return devices(nullptr); }

double host_to_device_gbs(int index, size_t bytes, std::string* error) {
  const plugin::Api* a = api(error);
  return a ? a->host_to_device_gbs(index, bytes, error) : 0;
}
double device_memory_gbs(int index, size_t bytes, std::string* error) {
  const plugin::Api* a = api(error);
  return a ? a->device_memory_gbs(index, bytes, error) : 0;
}
bool fp16_to_fp32(const uint16_t* x, float* y, size_t n, std::string* error) {
  const plugin::Api* a = api(error);
  return a && a->fp16_to_fp32(x, y, n, error);
}
bool dequantize(DType t, const void* w, int64_t n, float* y, std::string* error) {
  const plugin::Api* a = api(error);
  return a && a->dequantize(t, w, n, y, error);
}
bool matmul(DType t, const void* w, int64_t rows, int64_t cols, const float* x, int64_t m, float* y,
            std::string* error) {
  const plugin::Api* a = api(error);
  return a && a->matmul(t, w, rows, cols, x, m, y, error);
}
bool rms_norm(const float* x, const float* w, int64_t n, float eps, float* y, int64_t m, std::string* error) {
  const plugin::Api* a = api(error);
  return a && a->rms_norm(x, w, n, eps, y, m, error);
}
bool rope(float* x, int64_t m, int64_t token_stride, int n_heads, int64_t head_stride, int64_t offset, int n_pairs,
          bool neox, const float* cs, const float* sn, std::string* error) {
  const plugin::Api* a = api(error);
  return a && a->rope(x, m, token_stride, n_heads, head_stride, offset, n_pairs, neox, cs, sn, error);
}
bool swiglu(const float* g, const float* u, float* y, int64_t n, std::string* error) {
  const plugin::Api* a = api(error);
  return a && a->swiglu(g, u, y, n, error);
}
bool route(const hd::RouteParams& r, const float* logits, int64_t m, const float* bias, int* chosen, float* weight,
           std::string* error) {
  const plugin::Api* a = api(error);
  return a && a->route(r, logits, m, bias, chosen, weight, error);
}

}  // namespace moelsp::kernels::cuda

namespace moelsp::kernels::gpu {

std::unique_ptr<Device> make_cuda_device(int index, std::string* error) {
  const cuda::plugin::Api* a = cuda::api(error);
  return a ? a->make_device(index, error) : nullptr;
}

}  // namespace moelsp::kernels::gpu

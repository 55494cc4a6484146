// Models from the Hugging Face hub (or a mirror that serves its API): what
// `moelsp pull` does, and the cache it fills (`moelsp models`, `moelsp rm`).
//
// A reference names a repository and, optionally, which GGUF in it, as
// llama.cpp's `-hf` and Ollama spell it: `hf://owner/repo:Q4_K_M`,
// `owner/repo:Q4_K_M`, `hf://owner/repo/path/file.gguf`, `hf://owner/repo`.
// The repository's files come from the hub's tree API (sizes and the LFS
// SHA-256 of each); the file is fetched from `resolve/` (which redirects to a
// CDN), into `<cache>/<owner>/<repo>/<path>.part`, resumed with HTTP ranges
// after a cut, checked (size, SHA-256) and renamed. Environment, as the hub's
// own tools read it: HF_ENDPOINT (a mirror), HF_TOKEN (gated or private
// repositories; sent to the endpoint only, never to the CDN it redirects to),
// HTTPS_PROXY / HTTP_PROXY / NO_PROXY, SSL_CERT_FILE (OpenSSL's).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moelsp::gguf {
class File;
}

namespace moelsp::assist {

class Ticket;

struct ModelRef {
  std::string owner, repo;
  std::string quant;  // "Q4_K_M" (any case), or ""
  std::string file;   // a path in the repository, or ""
  std::string revision = "main";
  std::string repo_id() const { return owner + "/" + repo; }
};

// Throws std::invalid_argument naming what is wrong with `ref`.
ModelRef parse_model_ref(std::string_view ref);
// Whether a `model` value is a reference rather than a file: it starts with
// hf://, or reads owner/repo:QUANT (a file of that name would be taken as one).
bool looks_like_model_ref(std::string_view s);

struct HubFile {
  std::string path;  // in the repository
  uint64_t size = 0;
  std::string sha256;  // lower-case hex; "" when the hub gives none (not an LFS file)
};

// A split model's part in a GGUF file's name: "-00002-of-00003.gguf" →
// (2, 3); (0, 0) when the name is not split.
std::pair<int, int> split_part(std::string_view path);
// The quantization a GGUF file's name carries ("Q4_K_M", "UD-Q4_K_XL",
// "BF16"…; "" when none), the split suffix -00001-of-00003 ignored.
std::string quant_of(std::string_view path);
// The files `ref` names among a repository's files (every part of a split
// model, in order). Throws std::runtime_error naming the problem: no GGUF at
// all, a quant or file it lacks, several candidates and no quant (with the
// quants it has).
std::vector<HubFile> choose_files(const ModelRef& ref, const std::vector<HubFile>& files);

struct PullProgress {
  std::string file;  // the repository path being fetched
  uint64_t done = 0, total = 0;
  size_t part = 0, parts = 1;
  bool verifying = false;  // hashing what arrived
};

struct PullOptions {
  std::string endpoint = {};  // "": HF_ENDPOINT, else https://huggingface.co
  std::string token = {};     // "": HF_TOKEN
  std::string dir = {};       // the cache (models_dir())
  int timeout_s = 30;         // each connect and read
  std::function<void(const PullProgress&)> on_progress = {};
  std::function<void(const std::string&)> on_note = {};  // "already here", "resuming at …"
};

struct PullResult {
  std::vector<std::string> paths;  // on disk, one per part
  uint64_t downloaded = 0;         // bytes fetched now (0: all were in the cache)
};

// The hub (or the proxy before it) could not be reached or stopped answering:
// no connection, DNS, TLS, a cut. Every other request would fail the same way.
struct HubUnreachable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Fetches what `ref` names into the cache; throws std::runtime_error with a
// message naming the problem (network, HTTP status, checksum, disk).
PullResult pull(const ModelRef& ref, const PullOptions& opt, Ticket& ticket);

// What a reference names on the hub, without downloading it: its files,
// their size, and the first file's GGUF header (range requests; metadata and
// tensor infos only). Throws as pull() does.
struct RemoteModel {
  std::vector<HubFile> files;
  uint64_t bytes = 0;  // all parts
  std::shared_ptr<const gguf::File> header;
};
RemoteModel inspect_remote(const ModelRef& ref, const PullOptions& opt, Ticket& ticket);

// MOELSP_MODELS_DIR, else $XDG_CACHE_HOME/moelsp/models, else ~/.cache/moelsp/models.
std::string models_dir();

struct CachedFile {
  std::string rel;  // owner/repo/path, from the cache's root
  uint64_t size = 0;
  bool partial = false;  // a .part: an interrupted download `pull` resumes
};
std::vector<CachedFile> cached_models(const std::string& dir);
// The complete cached files `ref` names (in order), empty when not all there.
std::vector<std::string> cached_paths(const std::string& dir, const ModelRef& ref);
// Removes what a reference or a path relative to the cache names (all parts,
// and their .part files); returns the removed relative paths (empty: none).
std::vector<std::string> remove_cached(const std::string& dir, std::string_view ref_or_path);

}  // namespace moelsp::assist

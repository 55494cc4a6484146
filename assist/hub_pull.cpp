// `moelsp pull`'s network side: the hub's tree API, `resolve/` with its
// redirects, ranges to resume, the checks before the rename. See hub.h.
//
// Trade-offs:
// - A cut connection is retried at once from where it stopped when bytes
//   arrived since the last try, else up to 3 times with a growing pause: a
//   flaky link makes progress; a dead one fails in seconds, not minutes.
// - The SHA-256 is computed once the file is complete, reading it back
//   (~1-2 GB/s): a resumed download then needs no saved hash state.
// - A full disk is checked before the first byte (statvfs) and again by each
//   write; a write that fails removes the .part (nothing partial is left
//   where there is no room for it).
// - A .part remembers which file it is the start of: the hub's SHA-256 in
//   an extended attribute (user.moelsp.sha256). When the hub's file changed
//   since (a quantizer re-uploads a fixed quant), a resume would append the
//   new file's rest to the old file's start and fail the checksum after the
//   whole download; it starts again at once instead. Without xattrs (or for
//   a .part from before) it resumes as it would, and the checksum decides.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "assist/backend.h"
#include "assist/http_client.h"
#include "assist/hub.h"
#include "engine/gguf.h"
#include "engine/model_info.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace moelsp::assist {

namespace {

struct Split {
  std::string origin, target;  // https://host[:port], /path?query
};
Split split_url(const std::string& url) {
  const size_t scheme = url.find("://");
  const size_t slash = scheme == std::string::npos ? std::string::npos : url.find('/', scheme + 3);
  if (slash == std::string::npos) return {url, "/"};
  return {url.substr(0, slash), url.substr(slash)};
}

std::string percent_encode_path(std::string_view path) {
  std::string out;
  for (unsigned char c : path) {
    if (std::isalnum(c) || std::strchr("-_.~/", c)) out += char(c);
    else out += fmt::format("%{:02X}", c);
  }
  return out;
}

std::string human(uint64_t bytes) {
  if (bytes >= (1ull << 30)) return fmt::format("{:.1f} GiB", double(bytes) / double(1ull << 30));
  return fmt::format("{:.1f} MiB", double(bytes) / double(1ull << 20));
}

// One GET, redirects followed (up to 8), over one client per origin. The
// token goes to the endpoint's origin only: a CDN it redirects to gets none.
class Fetcher {
 public:
  Fetcher(const PullOptions& o, std::string endpoint, std::string token, Ticket& ticket)
      : opt_(o), endpoint_(std::move(endpoint)), token_(std::move(token)), ticket_(ticket) {}

  struct Answer {
    HttpClient::Head head;
    std::string error;  // the network's (no answer, or cut in the middle)
    std::string url;    // the last one asked
  };

  // on_data gets the final answer's body only (not a redirect's).
  Answer get(std::string url, const std::vector<std::pair<std::string, std::string>>& fields,
             const std::function<void(const HttpClient::Head&)>& on_head,
             const std::function<bool(std::string_view)>& on_data) {
    Answer a;
    for (int hop = 0; hop < 8; ++hop) {
      const Split s = split_url(url);
      HttpClient& c = client(s.origin);
      auto req_fields = fields;
      if (!token_.empty() && s.origin == split_url(endpoint_).origin)
        req_fields.emplace_back("Authorization", "Bearer " + token_);
      bool redirect = false;
      a.url = url;
      a.error = c.send(
          {.method = "GET", .target = s.target, .fields = req_fields, .body = {}},
          [&](const HttpClient::Head& h) {
            a.head = h;
            redirect = h.status == 301 || h.status == 302 || h.status == 303 || h.status == 307 || h.status == 308;
            if (!redirect) on_head(h);
          },
          [&](std::string_view d) { return redirect ? true : on_data(d); }, ticket_);
      if (!a.error.empty() || !redirect) return a;
      const std::string loc = a.head.field("Location");
      if (loc.empty()) {
        a.error = fmt::format("HTTP {} from {} without a Location", a.head.status, url);
        return a;
      }
      if (loc.find("://") != std::string::npos) url = loc;
      else if (loc.starts_with("//")) url = s.origin.substr(0, s.origin.find("//")) + loc;  // scheme-relative
      else url = s.origin + (loc.front() == '/' ? "" : "/") + loc;
    }
    a.error = "too many redirects from " + a.url;
    return a;
  }

  // A JSON document; throws with the hub's words for an error status.
  json get_json(const std::string& url, const std::string& what, std::string* next = nullptr) {
    std::string body;
    HttpClient::Head head;
    const Answer a = get(
        url, {{"Accept", "application/json"}}, [&](const HttpClient::Head& h) { head = h; },
        [&](std::string_view d) {
          body.append(d);
          return body.size() < (64u << 20);
        });
    if (!a.error.empty()) throw HubUnreachable(network_error(a.error));
    if (head.status != 200) throw std::runtime_error(status_error(head, body, what));
    if (next) *next = next_link(head.field("Link"));
    try {
      return json::parse(body);
    } catch (const json::exception& e) {
      throw std::runtime_error(fmt::format("{}: the answer from {} is not JSON ({})", what, url, e.what()));
    }
  }

  std::string network_error(const std::string& err) const {
    return err + fmt::format(" (the hub is {}; HF_ENDPOINT names a mirror, HTTPS_PROXY a proxy)", endpoint_);
  }

  std::string status_error(const HttpClient::Head& h, const std::string& body, const std::string& what) const {
    std::string said;
    try {
      said = json::parse(body).value("error", "");
    } catch (const json::exception&) {
      said = body.substr(0, 200);
    }
    const std::string code = h.field("X-Error-Code");
    if (h.status == 401 || h.status == 403)
      return fmt::format("{}: HTTP {} ({}): {}", what, h.status, said.empty() ? code : said,
                         token_.empty() ? "the repository is gated or private: accept its terms on the hub, then set "
                                          "HF_TOKEN to an access token with read rights"
                                        : "the token in HF_TOKEN was refused, or has no access to it");
    if (h.status == 404)
      return fmt::format("{}: not found on {} (HTTP 404{}{})", what, endpoint_, code.empty() ? "" : ", " + code,
                         said.empty() ? "" : ": " + said);
    return fmt::format("{}: HTTP {}{}", what, h.status, said.empty() ? "" : ": " + said);
  }

 private:
  static std::string next_link(const std::string& link) {  // <url>; rel="next"
    for (size_t at = 0; (at = link.find('<', at)) != std::string::npos;) {
      const size_t close = link.find('>', at);
      if (close == std::string::npos) break;
      const size_t end = link.find(',', close);
      if (link.substr(close, end == std::string::npos ? std::string::npos : end - close).find("rel=\"next\"") !=
          std::string::npos)
        return link.substr(at + 1, close - at - 1);
      at = close;
    }
    return "";
  }

  HttpClient& client(const std::string& origin) {
    auto& c = clients_[origin];
    if (!c)
      c = std::make_unique<HttpClient>(
          HttpClientOptions{.url = origin, .proxy = proxy_from_env(origin), .timeout_s = opt_.timeout_s});
    return *c;
  }

  const PullOptions& opt_;
  std::string endpoint_, token_;
  Ticket& ticket_;
  std::map<std::string, std::unique_ptr<HttpClient>> clients_;
};

// A path from the hub becomes a path under the cache: nothing that could
// leave it (an absolute path, a `..` component, a backslash, a NUL) is taken.
bool safe_path(const std::string& p) {
  if (p.empty() || p.front() == '/' || p.find('\\') != std::string::npos || p.find('\0') != std::string::npos)
    return false;
  for (size_t at = 0; at <= p.size();) {
    const size_t end = std::min(p.find('/', at), p.size());
    const std::string_view part(p.data() + at, end - at);
    if (part.empty() || part == "." || part == "..") return false;
    at = end + 1;
  }
  return true;
}

std::vector<HubFile> list_files(Fetcher& f, const std::string& endpoint, const ModelRef& ref) {
  std::vector<HubFile> files;
  std::string url = fmt::format("{}/api/models/{}/tree/{}?recursive=true", endpoint, ref.repo_id(), ref.revision);
  for (int page = 0; !url.empty() && page < 1000; ++page) {
    std::string next;
    const json list = f.get_json(url, "repository " + ref.repo_id(), &next);
    if (!list.is_array()) throw std::runtime_error("repository " + ref.repo_id() + ": the file list is not a list");
    for (const json& e : list) {
      if (!e.is_object() || e.value("type", "") != "file") continue;
      HubFile h{e.value("path", ""), e.value("size", uint64_t(0)), ""};
      if (const auto lfs = e.find("lfs"); lfs != e.end() && lfs->is_object()) {
        h.sha256 = lfs->value("oid", "");
        h.size = lfs->value("size", h.size);
      }
      if (safe_path(h.path)) files.push_back(std::move(h));
    }
    url = next;
  }
  return files;
}

std::string sha256_of(const std::string& path, Ticket& ticket) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr);
  std::vector<unsigned char> buf(1 << 20);
  for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), f.get())) > 0;) {
    if (ticket.cancelled()) throw std::runtime_error("cancelled");
    EVP_DigestUpdate(ctx.get(), buf.data(), n);
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  std::string hex;
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

struct FileJob {
  const HubFile& file;
  std::string url, final_path;
  size_t part, parts;
};

constexpr const char* kPartSha = "user.moelsp.sha256";

// The SHA-256 the hub listed when `part` was started ("" when not recorded).
std::string part_sha(const std::string& part) {
  char buf[128];
  const ssize_t n = ::getxattr(part.c_str(), kPartSha, buf, sizeof buf);
  return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

// A new .part: records whose start it is (best effort; see the top).
void mark_part(const std::string& part, const std::string& sha) {
  if (!sha.empty()) (void)::setxattr(part.c_str(), kPartSha, sha.data(), sha.size(), 0);
}

// Appends the rest of the file to its .part until it is whole.
void download(Fetcher& f, const FileJob& job, const PullOptions& opt, Ticket& ticket, uint64_t& fetched) {
  const std::string part = job.final_path + ".part";
  std::error_code ec;
  uint64_t have = fs::exists(part, ec) ? fs::file_size(part, ec) : 0;
  if (have > job.file.size) fs::remove(part, ec), have = 0;
  if (const std::string was = have > 0 ? part_sha(part) : ""; !was.empty() && was != job.file.sha256) {
    if (opt.on_note)
      opt.on_note(fmt::format("{} changed on the hub since the partial download (SHA-256 {} → {}): starting again",
                              job.file.path, was.substr(0, 12), job.file.sha256.substr(0, 12)));
    fs::remove(part, ec);
    have = 0;
  }
  if (have > 0 && opt.on_note) opt.on_note(fmt::format("resuming {} at {}", job.file.path, human(have)));
  int idle_tries = 0;
  while (have < job.file.size || job.file.size == 0) {
    if (ticket.cancelled()) throw std::runtime_error("cancelled");
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> out(std::fopen(part.c_str(), have ? "ab" : "wb"), &std::fclose);
    if (!out) throw std::runtime_error("cannot write " + part + ": " + std::strerror(errno));
    if (have == 0) mark_part(part, job.file.sha256);
    std::vector<std::pair<std::string, std::string>> fields;
    if (have > 0) fields.emplace_back("Range", fmt::format("bytes={}-", have));
    uint64_t before = have;
    std::string failure;  // an answer that is not the file (no retry)
    int status = 0;
    const Fetcher::Answer a = f.get(
        job.url, fields,
        [&](const HttpClient::Head& h) {
          status = h.status;
          if (h.status == 200 && have > 0) {  // the range was ignored: from the start
            out.reset(std::fopen(part.c_str(), "wb"));
            if (!out) failure = fmt::format("writing {}: {}", part, std::strerror(errno));
            fetched -= std::min(fetched, have);
            have = before = 0;
          } else if (h.status == 206) {
            const std::string cr = h.field("Content-Range");  // bytes A-B/T
            if (cr.rfind(fmt::format("bytes {}-", have), 0) != 0) {
              // Not where we asked: what is here may not be this file's start either.
              fs::remove(part, ec);
              failure = "the server resumed at " + cr + " instead of byte " + std::to_string(have) +
                        " (the partial file is removed; run the pull again)";
            }
          } else if (h.status != 200 && h.status != 416) {
            failure = f.status_error(h, "", job.file.path);
          }
        },
        [&](std::string_view d) {
          if (!failure.empty() || status == 416 || !out) return false;
          if (std::fwrite(d.data(), 1, d.size(), out.get()) != d.size()) {
            failure = fmt::format("writing {}: {}", part, std::strerror(errno));
            return false;
          }
          have += d.size();
          fetched += d.size();
          if (opt.on_progress) opt.on_progress({job.file.path, have, job.file.size, job.part, job.parts, false});
          return true;
        });
    if (out && std::fflush(out.get()) != 0 && failure.empty())
      failure = fmt::format("writing {}: {}", part, std::strerror(errno));
    out.reset();
    if (failure.rfind("writing ", 0) == 0) {
      fs::remove(part, ec);  // no room: nothing partial stays
      throw std::runtime_error(failure + " (the partial file was removed; free some space and pull again)");
    }
    if (!failure.empty()) throw std::runtime_error(failure);
    if (status == 416 || (a.error.empty() && job.file.size == 0)) break;
    if (a.error.empty() && have >= job.file.size) break;
    if (ticket.cancelled()) throw std::runtime_error("cancelled");
    // Cut short, or no answer: again from where it stopped.
    if (have > before) idle_tries = 0;
    else if (++idle_tries > 3)
      throw std::runtime_error(f.network_error(a.error.empty() ? "the download stalled" : a.error));
    if (opt.on_note)
      opt.on_note(
          fmt::format("{}: {}; resuming at {}", job.file.path, a.error.empty() ? "cut short" : a.error, human(have)));
    if (have == before) std::this_thread::sleep_for(std::chrono::milliseconds(500 * idle_tries));
  }
}

// The .part is whole: size and SHA-256 checked, then renamed into place.
void finish(const FileJob& job, const PullOptions& opt, Ticket& ticket) {
  const std::string part = job.final_path + ".part";
  std::error_code ec;
  const uint64_t size = fs::file_size(part, ec);
  if (ec) throw std::runtime_error("cannot read " + part + ": " + ec.message());
  if (size != job.file.size) {
    fs::remove(part, ec);
    throw std::runtime_error(fmt::format("{}: {} bytes arrived, the hub lists {} (removed; run the pull again)",
                                         job.file.path, size, job.file.size));
  }
  if (!job.file.sha256.empty()) {
    if (opt.on_progress) opt.on_progress({job.file.path, size, size, job.part, job.parts, true});
    const std::string got = sha256_of(part, ticket);
    if (got != job.file.sha256) {
      fs::remove(part, ec);
      throw std::runtime_error(fmt::format(
          "{}: checksum mismatch: its SHA-256 is {}, the hub lists {}; the download was corrupt and is removed",
          job.file.path, got, job.file.sha256));
    }
  }
  fs::rename(part, job.final_path, ec);
  if (ec) throw std::runtime_error("cannot rename " + part + ": " + ec.message());
}

// The first `n` bytes of a file (a range request; a server that ignores
// ranges is read only that far).
std::vector<uint8_t> head_bytes(Fetcher& f, const std::string& url, uint64_t n, const std::string& what) {
  std::vector<uint8_t> out;
  int status = 0;
  std::string failure;
  const Fetcher::Answer a = f.get(
      url, {{"Range", fmt::format("bytes=0-{}", n - 1)}},
      [&](const HttpClient::Head& h) {
        status = h.status;
        if (h.status != 200 && h.status != 206) failure = f.status_error(h, "", what);
      },
      [&](std::string_view d) {
        if (!failure.empty()) return false;
        out.insert(out.end(), d.begin(), d.begin() + long(std::min<uint64_t>(d.size(), n - out.size())));
        return out.size() < n;
      });
  if (!failure.empty()) throw std::runtime_error(failure);
  if (!a.error.empty() && out.size() < n) throw HubUnreachable(f.network_error(a.error));
  if (out.size() < n)
    throw std::runtime_error(
        fmt::format("{}: the server sent {} of the first {} bytes (HTTP {})", what, out.size(), n, status));
  return out;
}

// Before the download: the GGUF header (1 MiB, more while it goes on: a
// large vocabulary takes several) read with range requests and checked as
// `moelsp inspect` checks a file — the architecture, the weight types, the
// tensors it needs. A split model's first part holds the metadata but only
// some tensors: there, missing tensors are not held against it.
// The file's header: 1 MiB first, 4× more while it goes on.
gguf::File read_header(Fetcher& f, const std::string& url, const HubFile& h) {
  for (uint64_t n = 1u << 20;; n *= 4) {
    n = std::min(n, h.size);
    try {
      return gguf::File::from_header(head_bytes(f, url, n, h.path), h.size, h.path);
    } catch (const gguf::GgufHeaderIncomplete&) {
      if (n >= (256u << 20))
        throw std::runtime_error(h.path + ": its GGUF header is larger than 256 MiB; not a model moelsp can run");
    } catch (const gguf::GgufError& e) {
      throw std::runtime_error(
          fmt::format("{}: not a usable GGUF file: {} (nothing was downloaded)", h.path, e.what()));
    }
  }
}

void check_header(Fetcher& f, const std::string& url, const HubFile& h, bool split) {
  const gguf::File g = read_header(f, url, h);
  const ModelSummary m = summarize(g, /*check_tensors=*/!split);
  std::string problems;
  for (const std::string& p : m.problems) problems += (problems.empty() ? "" : "; ") + p;
  if (!problems.empty())
    throw std::runtime_error(fmt::format("{} ({}): moelsp cannot run it: {} (nothing was downloaded)", h.path,
                                         m.arch.empty() ? "no architecture" : m.arch, problems));
}

// An exclusive flock on the repository's folder while one of its files is
// fetched and checked (released with the process, however it ends).
class RepoLock {
 public:
  RepoLock(const std::string& dir, const PullOptions& opt, Ticket& ticket)
      : fd_(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) {
    if (fd_ < 0) throw std::runtime_error("cannot open " + dir + ": " + std::strerror(errno));
    bool told = false;
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK && errno != EINTR) break;  // no locking here (a network file system): go on
      if (!told && opt.on_note) opt.on_note("another moelsp is pulling into " + dir + ": waiting for it");
      told = true;
      if (ticket.cancelled()) {
        ::close(fd_);
        throw std::runtime_error("cancelled");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  ~RepoLock() { ::close(fd_); }
  RepoLock(const RepoLock&) = delete;
  RepoLock& operator=(const RepoLock&) = delete;

 private:
  int fd_;
};

void check_room(const std::string& dir, uint64_t needed) {
  struct statvfs st {};
  if (statvfs(dir.c_str(), &st) != 0) return;
  const uint64_t free_bytes = uint64_t(st.f_bavail) * uint64_t(st.f_frsize);
  if (free_bytes < needed)
    throw std::runtime_error(
        fmt::format("{} more are needed in {}, and its disk has {} free", human(needed), dir, human(free_bytes)));
}

std::string endpoint_of(const PullOptions& opt) {
  std::string endpoint = opt.endpoint;
  if (endpoint.empty()) {
    const char* e = std::getenv("HF_ENDPOINT");
    endpoint = e && *e ? e : "https://huggingface.co";
  }
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  return endpoint;
}

std::string token_of(const PullOptions& opt) {
  if (!opt.token.empty()) return opt.token;
  const char* t = std::getenv("HF_TOKEN");
  return t && *t ? t : "";
}

}  // namespace

RemoteModel inspect_remote(const ModelRef& ref, const PullOptions& opt, Ticket& ticket) {
  const std::string endpoint = endpoint_of(opt);
  Fetcher f(opt, endpoint, token_of(opt), ticket);
  RemoteModel out;
  out.files = choose_files(ref, list_files(f, endpoint, ref));
  for (const HubFile& h : out.files) out.bytes += h.size;
  const std::string url = fmt::format("{}/{}/resolve/{}/{}", endpoint, ref.repo_id(), ref.revision,
                                      percent_encode_path(out.files.front().path));
  out.header = std::make_shared<const gguf::File>(read_header(f, url, out.files.front()));
  return out;
}

PullResult pull(const ModelRef& ref, const PullOptions& opt, Ticket& ticket) {
  const std::string endpoint = endpoint_of(opt);
  Fetcher f(opt, endpoint, token_of(opt), ticket);
  const std::vector<HubFile> chosen = choose_files(ref, list_files(f, endpoint, ref));

  const std::string repo_dir = opt.dir + "/" + ref.repo_id();
  PullResult result;
  uint64_t missing = 0;
  std::error_code ec;
  for (const HubFile& h : chosen) {
    const std::string path = repo_dir + "/" + h.path;
    const bool whole = fs::exists(path, ec) && fs::file_size(path, ec) == h.size;
    const uint64_t part = fs::exists(path + ".part", ec) ? fs::file_size(path + ".part", ec) : 0;
    if (!whole) missing += h.size - std::min(h.size, part);
  }
  const auto url_of = [&](const HubFile& h) {
    return fmt::format("{}/{}/resolve/{}/{}", endpoint, ref.repo_id(), ref.revision, percent_encode_path(h.path));
  };
  if (missing > 0 && !fs::exists(repo_dir + "/" + chosen.front().path + ".part", ec))
    check_header(f, url_of(chosen.front()), chosen.front(), chosen.size() > 1);
  if (missing > 0) {
    fs::create_directories(repo_dir, ec);
    if (ec) throw std::runtime_error("cannot create " + repo_dir + ": " + ec.message());
    check_room(repo_dir, missing);
  }
  for (size_t i = 0; i < chosen.size(); ++i) {
    const HubFile& h = chosen[i];
    const FileJob job{h, url_of(h), repo_dir + "/" + h.path, i + 1, chosen.size()};
    result.paths.push_back(job.final_path);
    if (fs::exists(job.final_path, ec) && fs::file_size(job.final_path, ec) == h.size) {
      if (opt.on_note) opt.on_note(h.path + " is already in the cache");
      continue;
    }
    fs::create_directories(fs::path(job.final_path).parent_path(), ec);
    // Two pulls of one file (two editors' servers, a terminal beside one)
    // would append to one .part: the second waits for the first, then
    // finds the file there.
    const RepoLock lock(repo_dir, opt, ticket);
    if (fs::exists(job.final_path, ec) && fs::file_size(job.final_path, ec) == h.size) continue;
    download(f, job, opt, ticket, result.downloaded);
    finish(job, opt, ticket);
  }
  return result;
}

}  // namespace moelsp::assist

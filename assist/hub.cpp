// References, the choice of files in a repository, and the cache on disk
// (hub_pull.cpp fetches). See hub.h.
#include "assist/hub.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <system_error>

namespace fs = std::filesystem;

namespace moelsp::assist {

namespace {

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

bool ends_with_ci(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && upper(s.substr(s.size() - tail.size())) == upper(tail);
}

bool valid_name(std::string_view s) {
  return !s.empty() && s != "." && s != ".." && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

}  // namespace

// -00001-of-00003 before ".gguf": (part, parts); (0, 0) when not split.
// (By hand, not std::regex: GCC 12's <regex> trips -Wmaybe-uninitialized
// under the sanitizers' -O2, and these shapes are simple.)
std::pair<int, int> split_part(std::string_view path) {
  constexpr std::string_view kShape = "-#####-of-#####.gguf";
  if (path.size() < kShape.size()) return {0, 0};
  const std::string tail = upper(path.substr(path.size() - kShape.size()));
  for (size_t i = 0; i < kShape.size(); ++i) {
    const bool digit = std::isdigit(static_cast<unsigned char>(tail[i])) != 0;
    if (kShape[i] == '#' ? !digit : tail[i] != std::toupper(static_cast<unsigned char>(kShape[i]))) return {0, 0};
  }
  return {std::stoi(tail.substr(1, 5)), std::stoi(tail.substr(10, 5))};
}

namespace {

// The path without its split suffix: the parts of one model share it.
std::string split_base(std::string_view path) {
  if (split_part(path).second == 0) return std::string(path);
  return std::string(path.substr(0, path.size() - 20)) + std::string(path.substr(path.size() - 5));
}

std::string file_name(std::string_view path) {
  const size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

bool is_gguf(std::string_view path) {
  // A vision projector (mmproj-*.gguf) is not a language model.
  return ends_with_ci(path, ".gguf") && upper(file_name(path)).rfind("MMPROJ", 0) != 0;
}

bool quant_matches(std::string_view path, std::string_view quant) {
  const std::string q = upper(quant_of(path)), want = upper(quant);
  return !q.empty() && (q == want || (q.size() > want.size() && q.ends_with("-" + want)));
}

// Every part of the split model `f` belongs to, in order (f alone when not split).
std::vector<HubFile> with_parts(const HubFile& f, const std::vector<HubFile>& all) {
  if (split_part(f.path).second == 0) return {f};
  const std::string base = split_base(f.path);
  std::vector<HubFile> parts;
  for (const HubFile& g : all)
    if (split_part(g.path).second > 0 && split_base(g.path) == base) parts.push_back(g);
  std::sort(parts.begin(), parts.end(), [](const HubFile& a, const HubFile& b) { return a.path < b.path; });
  return parts;
}

std::string quant_list(const std::vector<HubFile>& ggufs) {
  std::vector<std::string> qs;
  for (const HubFile& f : ggufs) {
    const std::string q = quant_of(f.path);
    if (!q.empty() && std::find(qs.begin(), qs.end(), q) == qs.end()) qs.push_back(q);
  }
  std::string out;
  for (const auto& q : qs) out += (out.empty() ? "" : ", ") + q;
  return out.empty() ? "none named in its file names" : out;
}

}  // namespace

ModelRef parse_model_ref(std::string_view ref) {
  const std::string whole(ref);
  const auto bad = [&](const std::string& why) {
    return std::invalid_argument("'" + whole + "' is not a model reference (" + why +
                                 "): expected hf://owner/repo[:QUANT], owner/repo:QUANT or hf://owner/repo/file.gguf");
  };
  if (ref.starts_with("hf://")) ref.remove_prefix(5);
  else if (ref.starts_with("huggingface://")) ref.remove_prefix(14);
  ModelRef r;
  if (const size_t colon = ref.rfind(':'); colon != std::string_view::npos) {
    r.quant = std::string(ref.substr(colon + 1));
    ref = ref.substr(0, colon);
    if (!valid_name(r.quant)) throw bad("the quant after ':' is empty or has odd characters");
  }
  const size_t s1 = ref.find('/');
  if (s1 == std::string_view::npos) throw bad("no repository: owner/repo");
  const size_t s2 = ref.find('/', s1 + 1);
  r.owner = std::string(ref.substr(0, s1));
  r.repo = std::string(ref.substr(s1 + 1, s2 == std::string_view::npos ? std::string_view::npos : s2 - s1 - 1));
  if (!valid_name(r.owner) || !valid_name(r.repo)) throw bad("owner and repository are names of letters, digits, -_.");
  if (s2 != std::string_view::npos) {
    r.file = std::string(ref.substr(s2 + 1));
    if (r.file.empty() || r.file.find("..") != std::string::npos || r.file.front() == '/')
      throw bad("the file's path in the repository");
    if (!r.quant.empty()) throw bad("a file and a quant both");
  }
  return r;
}

bool looks_like_model_ref(std::string_view s) {
  if (s.starts_with("hf://") || s.starts_with("huggingface://")) return true;
  const size_t slash = s.find('/'), colon = s.find(':');
  if (slash == std::string_view::npos || colon == std::string_view::npos || colon < slash) return false;
  return valid_name(s.substr(0, slash)) && valid_name(s.substr(slash + 1, colon - slash - 1)) &&
         valid_name(s.substr(colon + 1)) && !fs::exists(fs::path(std::string(s)));
}

namespace {

// Whether `t` (upper case) is a quantization's name: Q4_K_M, IQ4_XS, Q8_0,
// TQ1_0, BF16, F16, F32, MXFP4, MXFP4_MOE (groups of letters and digits
// after Q<digit>_, one underscore apart).
bool is_quant_name(std::string_view t) {
  if (t == "BF16" || t == "F16" || t == "F32" || t == "MXFP4" || t == "MXFP4_MOE") return true;
  if (t.starts_with("TQ"))
    return t.size() == 5 && std::isdigit(static_cast<unsigned char>(t[2])) && t[3] == '_' &&
           std::isdigit(static_cast<unsigned char>(t[4]));
  if (t.starts_with("I")) t.remove_prefix(1);
  if (t.size() < 4 || t[0] != 'Q' || !std::isdigit(static_cast<unsigned char>(t[1])) || t[2] != '_') return false;
  t.remove_prefix(3);
  bool group = false;  // inside a group of letters and digits
  for (char c : t) {
    if (std::isalnum(static_cast<unsigned char>(c))) group = true;
    else if (c == '_' && group) group = false;
    else return false;
  }
  return group;
}

}  // namespace

std::string quant_of(std::string_view path) {
  std::string name = upper(split_base(file_name(path)));
  if (name.ends_with(".GGUF")) name.resize(name.size() - 5);
  // The leftmost name that starts after a separator and runs to the end ("UD-" may lead it).
  for (size_t i = 0; i < name.size(); ++i) {
    if (i > 0 && name[i - 1] != '-' && name[i - 1] != '_' && name[i - 1] != '.') continue;
    std::string_view t = std::string_view(name).substr(i);
    const std::string_view whole = t;
    if (t.starts_with("UD-")) t.remove_prefix(3);
    if (is_quant_name(t)) return std::string(whole);
  }
  return "";
}

std::vector<HubFile> choose_files(const ModelRef& ref, const std::vector<HubFile>& files) {
  std::vector<HubFile> ggufs;
  for (const HubFile& f : files)
    if (is_gguf(f.path)) ggufs.push_back(f);
  std::sort(ggufs.begin(), ggufs.end(), [](const HubFile& a, const HubFile& b) { return a.path < b.path; });
  const std::string id = ref.repo_id();
  if (ggufs.empty()) {
    std::string some;
    for (size_t i = 0; i < files.size() && i < 4; ++i) some += (i ? ", " : "") + files[i].path;
    throw std::runtime_error(id + " has no GGUF files" + (some.empty() ? "" : " (it has " + some + "…)") +
                             ": moelsp runs GGUF models; their repositories usually end in -GGUF");
  }
  if (!ref.file.empty()) {
    for (const HubFile& f : ggufs)
      if (f.path == ref.file) return with_parts(f, ggufs);
    throw std::runtime_error(id + " has no file " + ref.file);
  }
  if (!ref.quant.empty()) {
    for (const HubFile& f : ggufs)
      if (quant_matches(f.path, ref.quant)) return with_parts(f, ggufs);
    throw std::runtime_error(id + " has no " + upper(ref.quant) + " file; it has " + quant_list(ggufs));
  }
  std::map<std::string, HubFile> models;  // split base → its first file
  for (const HubFile& f : ggufs) models.emplace(split_base(f.path), f);
  if (models.size() == 1) return with_parts(models.begin()->second, ggufs);
  for (const HubFile& f : ggufs)
    if (quant_matches(f.path, "Q4_K_M")) return with_parts(f, ggufs);
  throw std::runtime_error(id + " has several GGUF files: name one with " + id + ":QUANT; it has " + quant_list(ggufs));
}

std::string models_dir() {
  if (const char* d = std::getenv("MOELSP_MODELS_DIR"); d && *d) return d;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/moelsp/models";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.cache/moelsp/models";
}

std::vector<CachedFile> cached_models(const std::string& dir) {
  std::vector<CachedFile> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (auto it = fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const std::string rel = fs::relative(it->path(), dir, ec).generic_string();
    const bool partial = ends_with_ci(rel, ".gguf.part");
    if (!partial && !ends_with_ci(rel, ".gguf")) continue;
    out.push_back({rel, uint64_t(it->file_size(ec)), partial});
  }
  std::sort(out.begin(), out.end(), [](const CachedFile& a, const CachedFile& b) { return a.rel < b.rel; });
  return out;
}

namespace {

// The complete GGUF files under <dir>/<owner>/<repo>, as the repository names them.
std::vector<HubFile> local_files(const std::string& dir, const ModelRef& ref) {
  std::vector<HubFile> out;
  const std::string prefix = ref.repo_id() + "/";
  for (const CachedFile& c : cached_models(dir))
    if (!c.partial && c.rel.rfind(prefix, 0) == 0) out.push_back({c.rel.substr(prefix.size()), c.size, ""});
  return out;
}

}  // namespace

std::vector<std::string> cached_paths(const std::string& dir, const ModelRef& ref) {
  const std::vector<HubFile> local = local_files(dir, ref);
  std::vector<std::string> out;
  try {
    for (const HubFile& f : choose_files(ref, local)) out.push_back(dir + "/" + ref.repo_id() + "/" + f.path);
  } catch (const std::runtime_error&) {
    return {};
  }
  // A split model counts only with every part.
  if (!out.empty()) {
    const int parts = split_part(out.front()).second;
    if (parts > 0 && int(out.size()) != parts) return {};
  }
  return out;
}

std::vector<std::string> remove_cached(const std::string& dir, std::string_view ref_or_path) {
  std::vector<std::string> rels;
  std::error_code ec;
  if (fs::is_regular_file(fs::path(dir) / std::string(ref_or_path), ec) &&
      ref_or_path.find("..") == std::string::npos) {
    const std::string rel(ref_or_path);
    const std::string base = split_base(rel);
    for (const CachedFile& c : cached_models(dir))
      if (c.rel == rel || c.rel == rel + ".part" || (split_part(rel).second > 0 && split_base(c.rel) == base))
        rels.push_back(c.rel);
  } else {
    ModelRef ref;
    try {
      ref = parse_model_ref(ref_or_path);
    } catch (const std::invalid_argument&) {
      return {};
    }
    const std::string prefix = ref.repo_id() + "/";
    for (const CachedFile& c : cached_models(dir)) {
      if (c.rel.rfind(prefix, 0) != 0) continue;
      const std::string path = c.rel.substr(prefix.size(), c.partial ? c.rel.size() - prefix.size() - 5 : c.rel.npos);
      const bool named = ref.file.empty() && ref.quant.empty() ? true
                         : ref.file.empty()                    ? quant_matches(path, ref.quant)
                                            : path == ref.file || split_base(path) == split_base(ref.file);
      if (named) rels.push_back(c.rel);
    }
  }
  for (const std::string& rel : rels) {
    fs::remove(fs::path(dir) / rel, ec);
    // Empty folders left behind go too, up to the cache's root.
    for (fs::path p = (fs::path(dir) / rel).parent_path(); p != fs::path(dir) && fs::is_empty(p, ec) && !ec;
         p = p.parent_path())
      fs::remove(p, ec);
  }
  return rels;
}

}  // namespace moelsp::assist

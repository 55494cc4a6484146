// Locating test data. Data lives in tests/data (copied from the project's
// shared reference data, with a provenance README); a missing file fails the test loudly, never skips it.
#pragma once

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <catch2/catch.hpp>

namespace moelsp::test {

inline std::string data_path(const std::string& rel) {
  const std::filesystem::path p = std::filesystem::path(MOELSP_TEST_DATA) / rel;
  INFO("test data file " << p);
  REQUIRE(std::filesystem::exists(p));
  return p.string();
}

// The same check for a path that is already absolute.
inline std::string data_path_abs(const std::string& path) {
  INFO("test data file " << path);
  REQUIRE(std::filesystem::exists(path));
  return path;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace moelsp::test

// Page arithmetic shared by the expert prefetcher and the hot cache:
// madvise, mlock and mincore take whole pages.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kernels/matmul.h"

namespace moelsp::expert_pages {

inline size_t page_size() {
  static const size_t p = size_t(sysconf(_SC_PAGESIZE));
  return p;
}

inline size_t mat_bytes(const kernels::MatView& v) { return size_t(v.rows) * v.row_bytes; }

// [p, p + n) widened to whole pages.
struct Pages {
  void* p;
  size_t n;
  size_t count() const { return n / page_size(); }
};
inline Pages pages(const void* p, size_t n) {
  const size_t ps = page_size();
  const auto a = reinterpret_cast<uintptr_t>(p) & ~(ps - 1);
  const auto b = (reinterpret_cast<uintptr_t>(p) + n + ps - 1) & ~(ps - 1);
  return {reinterpret_cast<void*>(a), b - a};
}
inline Pages pages(const kernels::MatView& v) { return pages(v.row(0), mat_bytes(v)); }

// Are all of them in memory? (true when the kernel cannot tell.) `vec` gets
// mincore's answer per page.
inline bool all_resident(Pages pg, std::vector<unsigned char>& vec) {
  vec.resize(pg.count());
  if (mincore(pg.p, pg.n, vec.data()) != 0) return true;
  return std::all_of(vec.begin(), vec.end(), [](unsigned char c) { return c & 1; });
}

}  // namespace moelsp::expert_pages

// libFuzzer target: the GGUF reader (and the model loader's checks) on
// arbitrary bytes. Each input is a file in memory (memfd) opened by path, as
// a model is: a clean GgufError/ModelError is fine, a crash or a sanitizer
// report is a finding.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "engine/gguf.h"
#include "engine/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memfd_create("fuzz.gguf", 0);
  if (fd < 0) return 0;
  if (write(fd, data, size) != ssize_t(size)) {
    close(fd);
    return 0;
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  try {
    const auto f = moelsp::gguf::File::open(path);
    for (const auto& t : f.tensors()) (void)f.tensor_data(t);
    (void)moelsp::Model::load(path, {.threads = 1});
  } catch (const std::exception&) {
  }
  close(fd);
  return 0;
}

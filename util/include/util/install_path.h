// Where an installed moelsp keeps its other files, relative to the binary
// (kernels/cuda/loader.cpp has its own copy: kernels/ includes nothing of ours):
// a package, `cmake --install` to any prefix, or `dpkg --root` put share/
// and lib/ beside the bin/ the executable runs from.
#pragma once

#include <string>
#include <string_view>

namespace moelsp {

// <the running executable's folder>/../<relative>, normalized; "" when
// /proc/self/exe cannot be read.
std::string beside_executable(std::string_view relative);

}  // namespace moelsp

#include <cstdio>
#include <cstdlib>

#include "fuzz.h"

namespace loom::fuzz {

void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz oracle failed: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace loom::fuzz

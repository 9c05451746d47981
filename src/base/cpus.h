// The CPUs this process may run on (its affinity mask), as a list like "0-3,8": what a launcher's
// binding (loomrun --bind, mpirun --bind-to) left it. Shown in statistics and benchmark headers.
//
// Thread safety: a plain function (the mask is the calling thread's).
#pragma once

#include <string>

namespace loom {

// "" if the mask cannot be read.
std::string allowed_cpus();

}  // namespace loom

#include "base/cpus.h"

#include <fmt/format.h>
#include <sched.h>

namespace loom {

std::string allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return "";
  std::string out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    int last = c;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set)) ++last;
    out += fmt::format("{}{}", out.empty() ? "" : ",", c);
    if (last > c) out += fmt::format("-{}", last);
    c = last;
  }
  return out;
}

}  // namespace loom

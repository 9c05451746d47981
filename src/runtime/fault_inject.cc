#include "runtime/fault_inject.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "base/log.h"

namespace loom::runtime {
namespace {

constexpr std::string_view kPoints[] = {"boot", "setup", "run", "shutdown", "exit"};
constexpr std::string_view kActions[] = {"kill", "stop", "exit", "exit0", "hang", "deaf"};

template <size_t N>
bool one_of(std::string_view s, const std::string_view (&set)[N]) {
  for (std::string_view x : set)
    if (s == x) return true;
  return false;
}

int rank_from_env() {
  for (const char* var : {"LOOM_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK"})
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') return std::atoi(v);
  return -1;
}

}  // namespace

Result<FaultInject> FaultInject::parse(std::string_view spec) {
  FaultInject f;
  if (spec.empty()) return f;
  size_t a = spec.find(':');
  size_t b = a == std::string_view::npos ? a : spec.find(':', a + 1);
  auto bad = [&] {
    return Status::invalid_argument(fmt::format(
        "LOOM_FAULT_INJECT='{}': expected RANK:POINT:ACTION, POINT one of boot, setup, "
        "run, shutdown, exit and ACTION one of kill, stop, exit, exit0, hang (or setup:deaf)",
        spec));
  };
  if (b == std::string_view::npos) return bad();
  std::string rank(spec.substr(0, a));
  f.point_ = std::string(spec.substr(a + 1, b - a - 1));
  f.action_ = std::string(spec.substr(b + 1));
  char* end = nullptr;
  long r = std::strtol(rank.c_str(), &end, 10);
  if (rank.empty() || *end != '\0' || r < 0 || !one_of(f.point_, kPoints) ||
      !one_of(f.action_, kActions) || (f.action_ == "deaf" && f.point_ != "setup"))
    return bad();
  f.rank_ = static_cast<int>(r);
  return f;
}

bool FaultInject::victim_at(std::string_view point, int rank) const {
  if (rank_ < 0 || point != point_) return false;
  if (rank < 0) rank = rank_from_env();
  return rank == rank_;
}

bool FaultInject::deaf(int rank) const { return action_ == "deaf" && victim_at("setup", rank); }

void FaultInject::at(std::string_view point, int rank) const {
  if (!victim_at(point, rank)) return;
  double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  log::write_tagged("inject", fmt::format("{} {} at {:.6f}", point_, action_, now));
  if (action_ == "kill") ::kill(::getpid(), SIGKILL);
  if (action_ == "stop") ::kill(::getpid(), SIGSTOP);
  if (action_ == "exit") std::exit(1);
  if (action_ == "exit0") std::exit(0);
  if (action_ == "hang")
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

}  // namespace loom::runtime

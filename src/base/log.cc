#include "base/log.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>

namespace loom::log {
namespace {

std::atomic<int> g_rank{-1};
std::atomic<int> g_level{static_cast<int>(Level::kWarn)};

struct Dumpers {
  std::mutex mu;
  std::map<int, std::function<void()>> fns;
  int next_id = 1;
};
Dumpers& dumpers() {
  static Dumpers* d = new Dumpers;  // never destroyed: used during abort
  return *d;
}

const char* level_name(Level l) {
  switch (l) {
    case Level::kError:
      return "error";
    case Level::kWarn:
      return "warn";
    case Level::kInfo:
      return "info";
    case Level::kDebug:
      return "debug";
  }
  return "?";
}

void write_line(std::string_view tag, std::string_view msg) {
  int r = g_rank.load(std::memory_order_relaxed);
  std::string line = r >= 0 ? fmt::format("loom[{}] {}: {}\n", r, tag, msg)
                            : fmt::format("loom[?] {}: {}\n", tag, msg);
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n <= 0) break;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

constexpr unsigned kDumpSeconds = 3;

void on_dump_alarm(int) {
  static const char kMsg[] =
      "loom: a state dumper did not finish within 3 s (it waits for a lock the failing thread "
      "holds?); aborting without the rest of the dump\n";
  ssize_t n = ::write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
  (void)n;
  ::signal(SIGABRT, SIG_DFL);
  std::abort();
}

}  // namespace

void set_rank(int rank) { g_rank.store(rank, std::memory_order_relaxed); }
int rank() { return g_rank.load(std::memory_order_relaxed); }
void set_level(Level level) { g_level.store(static_cast<int>(level), std::memory_order_relaxed); }
Level level() { return static_cast<Level>(g_level.load(std::memory_order_relaxed)); }
bool enabled(Level l) { return static_cast<int>(l) <= g_level.load(std::memory_order_relaxed); }

void write(Level l, std::string_view msg) { write_line(level_name(l), msg); }
void write_tagged(std::string_view tag, std::string_view msg) { write_line(tag, msg); }

int add_state_dumper(std::function<void()> fn) {
  auto& d = dumpers();
  std::lock_guard<std::mutex> lock(d.mu);
  int id = d.next_id++;
  d.fns.emplace(id, std::move(fn));
  return id;
}

void remove_state_dumper(int id) {
  auto& d = dumpers();
  std::lock_guard<std::mutex> lock(d.mu);
  d.fns.erase(id);
}

void fatal(std::string_view msg) {
  write_line("fatal", msg);
  auto& d = dumpers();
  // why: a dumper must never block the abort. Dumpers try-lock what they print, but the check
  // that failed may hold a lock that some dumper takes (the failing thread holds it: a plain
  // lock would deadlock). So the dumpers run under an alarm: if they have not finished within
  // kDumpSeconds, the process aborts from the alarm's handler.
  struct sigaction sa {};
  sa.sa_handler = on_dump_alarm;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGALRM, &sa, nullptr);
  sigset_t alrm;
  sigemptyset(&alrm);
  sigaddset(&alrm, SIGALRM);
  ::pthread_sigmask(SIG_UNBLOCK, &alrm, nullptr);
  ::alarm(kDumpSeconds);
  // try_lock: a dumper that itself fails must not deadlock the abort.
  if (d.mu.try_lock()) {
    for (auto& [id, fn] : d.fns) fn();
    d.mu.unlock();
  }
  std::abort();
}

void die(int exit_code, std::string_view msg) {
  write_line("error", msg);
  std::_Exit(exit_code);
}

}  // namespace loom::log

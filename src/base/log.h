// Logging and invariant checks.
//
// Every line names the node: "loom[2] warn: ...". Before the runtime knows its rank the prefix is
// "loom[?]". LOOM_CHECK stays on in release builds: a broken invariant aborts with the state that
// explains it (the message, plus whatever the registered state dumpers print), never a hang.
//
// Thread safety: all functions may be called from any thread, including the server thread.
#pragma once

#include <fmt/format.h>

#include <functional>
#include <string_view>

namespace loom::log {

enum class Level { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

void set_rank(int rank);
int rank();
void set_level(Level level);
Level level();
bool enabled(Level level);

// Writes one line to stderr (a single write(2), so lines from threads do not interleave).
void write(Level level, std::string_view msg);
// Writes "loom[r] <tag>: msg" whatever the level (message traces).
void write_tagged(std::string_view tag, std::string_view msg);

// Registers a function that prints node state (page table, protocol state) when Loom aborts.
// Returns an id for remove_state_dumper.
int add_state_dumper(std::function<void()> fn);
void remove_state_dumper(int id);

// Prints "loom[r] fatal: msg", runs the state dumpers, and aborts (SIGABRT, core if enabled).
[[noreturn]] void fatal(std::string_view msg);
// Prints "loom[r] error: msg" and terminates the process with `exit_code` without unwinding.
[[noreturn]] void die(int exit_code, std::string_view msg);

}  // namespace loom::log

#define LOOM_LOG(lvl, ...)                                                     \
  do {                                                                         \
    if (::loom::log::enabled(::loom::log::Level::lvl))                         \
      ::loom::log::write(::loom::log::Level::lvl, ::fmt::format(__VA_ARGS__)); \
  } while (0)
#define LOOM_ERROR(...) LOOM_LOG(kError, __VA_ARGS__)
#define LOOM_WARN(...) LOOM_LOG(kWarn, __VA_ARGS__)
#define LOOM_INFO(...) LOOM_LOG(kInfo, __VA_ARGS__)
#define LOOM_DEBUG(...) LOOM_LOG(kDebug, __VA_ARGS__)

// LOOM_CHECK(cond, "fmt", args...): aborts with file:line, the condition and the message.
#define LOOM_CHECK(cond, ...)                                                                    \
  do {                                                                                           \
    if (__builtin_expect(!(cond), 0))                                                            \
      ::loom::log::fatal(::fmt::format("{}:{}: check failed: {}: {}", __FILE__, __LINE__, #cond, \
                                       ::fmt::format(__VA_ARGS__)));                             \
  } while (0)

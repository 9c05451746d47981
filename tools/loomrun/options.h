// loomrun's command line and the LOOM_* settings it passes to the nodes.
//
//   loomrun -n N [options] program [args...]
//
// Options end at the program name; everything after it goes to the program untouched. Every
// non-internal row of the configuration table (base/config.h) is also a flag, --<row-in-kebab>
// VALUE, validated with the table's parser and passed on as LOOM_<ROW>. --stats and --stats-json
// are loomrun's own (they also set LOOM_STATS / LOOM_STATS_JSON, see docs/launcher.md).
//
// Errors are printed as one line "loomrun: ..." and map to exit status 2.
//
// Thread safety: plain functions on values.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

namespace loom::loomrun {

inline constexpr uint32_t kMaxNodes = 1024;
inline constexpr int kUsageError = 2;
inline constexpr uint32_t kNoStdin = UINT32_MAX;

// --bind: whether loomrun gives each node a share of its CPUs.
enum class Bind {
  kAuto,  // when the nodes are no more than loomrun's CPUs: node r the r-th contiguous share
  kNone,  // every node may run on every CPU loomrun may use
};

struct Options {
  uint32_t nodes = 0;
  Bind bind = Bind::kAuto;
  bool tag_output = false;
  double timeout_s = 0;  // 0: no timeout
  double kill_grace_s = 2;
  bool stats = false;
  std::string stats_json;  // empty: not requested
  // The node that gets loomrun's stdin (--stdin; the others read /dev/null). kNoStdin: none.
  uint32_t stdin_rank = 0;
  // LOOM_* variables set by flags: variable name -> canonical value.
  std::map<std::string, std::string> settings;
  std::vector<std::string> command;  // program, then its arguments
};

// Parses the command line. Returns the options, or the exit status to return at once: 0 after
// --help or --help-config was printed, kUsageError after an error line was printed.
std::variant<Options, int> parse_options(int argc, char** argv);

// Checks the LOOM_* variables in loomrun's own environment with the table's parser (those that a
// flag overrides excepted). A malformed value prints one line and returns false; an unknown
// LOOM_ variable prints a warning.
bool check_environment(const Options& options);

// The value the nodes get for integer row `name` ("STARTUP_TIMEOUT_MS"): the flag's, else
// loomrun's environment's, else the default. REQUIRES: check_environment() passed.
int64_t node_setting_int(const Options& options, std::string_view name);

}  // namespace loom::loomrun

// The configuration table: every Loom setting is one row (name, type, default, meaning).
//
// Values come from LOOM_<NAME> environment variables; `loomrun` turns its flags (--<name-in-kebab>)
// into those variables for every node, and `loomrun --help-config` prints the table. A malformed
// value is an error naming the variable, the value and what was expected; an unknown LOOM_ variable
// is reported so typos do not pass silently.
//
// Thread safety: a Config is immutable after load(); read it from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include "loom/status.h"

namespace loom {

enum class ConfigType { kBool, kInt, kSize, kString, kEnum };

struct ConfigRow {
  const char* name;  // without the LOOM_ prefix, e.g. "SPIN_US"
  ConfigType type;
  const char* default_value;  // as text, parsed like an environment value
  const char* meaning;
  const char* choices = "";  // kEnum: "a|b|c"
  int64_t min = 0;           // kInt, kSize: inclusive range
  int64_t max = INT64_MAX;
  bool internal = false;  // set by the launcher, not by users
};

// All rows, in the order --help-config prints them.
std::span<const ConfigRow> config_table();
const ConfigRow* find_config_row(std::string_view name);

// Parses `text` as a value of `row`; on success stores the canonical value in *out.
Status parse_config_value(const ConfigRow& row, std::string_view text, std::string* out);

// "--spin-us" for row SPIN_US.
std::string config_flag_name(const ConfigRow& row);
// "LOOM_SPIN_US".
std::string config_env_name(const ConfigRow& row);

// The table formatted for --help-config.
std::string format_config_table();

class Config {
 public:
  // Defaults only.
  Config();
  // Defaults overridden by LOOM_* variables in the environment. Unknown LOOM_ variables produce a
  // warning, malformed values an error.
  static Result<Config> from_env();
  // Defaults overridden by `values` (name without prefix -> text).
  static Result<Config> from_map(const std::map<std::string, std::string>& values);

  bool get_bool(std::string_view name) const;
  int64_t get_int(std::string_view name) const;                // also kSize (bytes)
  const std::string& get_string(std::string_view name) const;  // also kEnum
  // Overrides one value (tests, programs that configure themselves).
  Status set(std::string_view name, std::string_view text);

 private:
  const std::string& raw(std::string_view name) const;
  std::map<std::string, std::string, std::less<>> values_;
};

}  // namespace loom

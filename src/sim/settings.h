// The settings that change what the protocols do, and how a check varies them.
//
// Each setting is one row of settings(): its loom-sim flag, what it means, the protocols it
// applies to, its range, how it reads and writes sim::Options, and the values a check draws from.
// `loom-sim --check` in its default mode (`--settings vary`) gives every program its own settings,
// drawn from the program's seed (draw_settings): the same seed always gives the same settings,
// so `--check 1 --seed S` replays program S of any batch. A setting given on the command line is
// fixed for every program instead. `--settings default` runs every program with the defaults (the
// flags still apply), as the checker did before settings varied (docs/sim.md#settings).
//
// A new setting joins the draw by adding its row to the table in settings.cc: loom-sim then has
// its flag, draws it, counts the programs that ran with each value, and prints it with a failure.
//
// Thread safety: the table is immutable; the functions are pure.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "sim/sim.h"

namespace loom::sim {

struct Setting {
  std::string_view name;  // the loom-sim flag without its "--"
  std::string_view what;  // the flag's help text
  // The protocols it changes: every one, or only the one named.
  std::string_view only_protocol;  // empty: every protocol
  uint64_t min = 0, max = 1;       // the flag's range
  std::vector<uint64_t> values;    // what a program of `--settings vary` runs with, each as likely
  uint64_t (*get)(const Options&);
  void (*set)(Options&, uint64_t);

  bool applies_to(std::string_view protocol) const {
    return only_protocol.empty() || only_protocol == protocol;
  }
};

const std::vector<Setting>& settings();
// null if there is no such setting.
const Setting* find_setting(std::string_view name);

enum class SettingsMode : uint8_t { kDefault, kVary };

// `base` with each setting that applies to base.protocol and is not in `fixed` set to a value
// drawn from `program_seed`. Each setting's draw depends only on the seed and its name, so adding
// a setting leaves the others' draws as they were.
Options draw_settings(const Options& base, uint64_t program_seed,
                      const std::set<std::string>& fixed);

// "home-migration=2 push-pages=0 ...": every setting that applies to options.protocol.
std::string describe_settings(const Options& options);
// The flags that give exactly these settings whatever the mode:
// "--settings default --home-migration 2 --push-pages 0 ..." (only values other than the
// default are named).
std::string settings_flags(const Options& options);

}  // namespace loom::sim

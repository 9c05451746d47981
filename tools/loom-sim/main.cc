// loom-sim: runs Loom's protocol and synchronization code for many simulated nodes in one
// process, deterministically (docs/sim.md).
//
//   loom-sim --check K [--seed S] [--schedules M] [--protocol P] [--mutant NAME] [--litmus NAME]
//            [--settings vary|default] [--home-migration N --push-pages N ... (sim/settings.h)]
//            [--trace]
//       checks K programs (seeds S, S+1, ...: random data-race-free programs and litmus tests),
//       each under M schedules and with its own settings drawn from its seed (unless given as
//       flags, or --settings default), with the consistency checker; exit 0 only if there was no
//       violation.
//   loom-sim --scenario NAME --nodes N [--protocol P] [--json]
//       runs a communication scenario and prints its message and byte counts.
//   loom-sim --table [--table-nodes 2,3,4,...] [--json]
//       every scenario at every node count, with how messages and bytes grow with n.
//   loom-sim --list-scenarios | --list-mutants | --list-litmus
//
// Exit status: 0 success, 1 a violation or failed run (the seed and a trace are printed), 2 a
// usage error.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "base/log.h"
#include "sim/batch.h"
#include "sim/programs.h"
#include "sim/scenarios.h"
#include "sim/settings.h"

namespace {

using namespace loom;
using namespace loom::sim;

constexpr int kExitViolation = 1;
constexpr int kExitUsage = 2;

int usage_error(const std::string& msg) {
  std::cerr << "loom-sim: " << msg << '\n';
  return kExitUsage;
}

// A failed simulation is abandoned with its threads parked (sim.h); leave without running
// destructors or leak checks.
[[noreturn]] void exit_now(int code) {
  std::cout.flush();
  std::cerr.flush();
  _exit(code);
}

const MutantInfo* find_mutant(const std::string& name) {
  for (const MutantInfo& m : mutants())
    if (m.name == name) return &m;
  return nullptr;
}

std::string drawn_json_key(uint64_t v) { return std::to_string(v); }

// "home-migration 0:101 1:99 2:97 3:103; push-pages ..."
std::string drawn_text(const BatchResult& r) {
  std::string out;
  for (const auto& [name, counts] : r.drawn) {
    out += fmt::format("{}{}", out.empty() ? "" : "; ", name);
    for (const auto& [value, programs] : counts) out += fmt::format(" {}:{}", value, programs);
  }
  return out;
}

// What a failed run of program `seed` (schedule `schedule`) prints after its reason: the settings
// it ran with and the commands that replay it.
std::string failure_report(const BatchOptions& batch, const std::string& mutant, uint64_t seed,
                           uint64_t schedule, const Options& o, uint64_t runs_passed) {
  std::string common =
      fmt::format("--check 1 --seed {}{}{}{}{}", seed,
                  batch.schedules > 1 ? fmt::format(" --schedules {}", schedule + 1) : "",
                  batch.litmus ? " --litmus " + *batch.litmus : "",
                  o.protocol == "hlrc" ? "" : " --protocol " + o.protocol,
                  mutant.empty() ? "" : " --mutant " + mutant);
  std::string out = fmt::format(
      "loom-sim: program {} ran with the settings {} ({})\n"
      "loom-sim: {} runs passed before this one; replay with: loom-sim {} {} --trace\n",
      seed, describe_settings(o),
      batch.mode == SettingsMode::kVary ? "drawn from its seed" : "the defaults and the flags",
      runs_passed, common, settings_flags(o));
  if (batch.mode == SettingsMode::kVary && batch.fixed.empty())
    out += fmt::format("loom-sim: (or with the settings drawn again: loom-sim {})\n", common);
  return out;
}

// Runs programs seed..seed+count-1, each under `schedules` schedules: the first with the
// program's own seed, the others with seeds derived from it.
int run_check(BatchOptions batch, const std::string& mutant, bool json) {
  // A check that fails inside protocol code (LOOM_CHECK) aborts; its report names the run too.
  struct Current {
    uint64_t seed = 0, schedule = 0, runs = 0;
    Options options;
  } current;
  batch.starting = [&current](uint64_t s, uint64_t j, const Options& o) {
    ++current.runs;  // called once per run
    current.seed = s;
    current.schedule = j;
    current.options = o;
  };
  int dumper = log::add_state_dumper([&] {
    std::cerr << failure_report(batch, mutant, current.seed, current.schedule, current.options,
                                current.runs - 1);
  });
  BatchResult r = run_batch(batch);
  log::remove_state_dumper(dumper);
  const char* mode = batch.mode == SettingsMode::kVary ? "vary" : "default";
  if (!r.failure.is_ok()) {
    std::cerr << "loom-sim: " << r.failure.message() << '\n'
              << failure_report(batch, mutant, r.failed_seed, r.failed_schedule, r.failed_options,
                                r.runs);
    exit_now(kExitViolation);
  }
  if (json) {
    nlohmann::json drawn = nlohmann::json::object();
    for (const auto& [name, counts] : r.drawn)
      for (const auto& [value, programs] : counts) drawn[name][drawn_json_key(value)] = programs;
    nlohmann::json j{{"checked", r.programs},
                     {"schedules", batch.schedules},
                     {"runs", r.runs},
                     {"litmus", r.litmus},
                     {"random", r.programs - r.litmus},
                     {"reads_checked", r.reads},
                     {"writes", r.writes},
                     {"messages", r.messages},
                     {"violations", 0},
                     {"seed", batch.seed},
                     {"protocol", batch.base.protocol},
                     {"settings", mode},
                     {"settings_drawn", drawn},
                     {"trace_fingerprint", fmt::format("{:016x}", r.fingerprint)}};
    std::cout << j.dump() << '\n';
  } else {
    std::cout << fmt::format(
        "checked {} programs ({} random, {} litmus) x {} schedules from seed {}: {} reads "
        "verified, {} writes, {} messages; no violation (settings {}, trace fingerprint "
        "{:016x})\n",
        r.programs, r.programs - r.litmus, r.litmus, batch.schedules, batch.seed, r.reads, r.writes,
        r.messages, mode, r.fingerprint);
    if (batch.mode == SettingsMode::kVary)
      std::cout << "programs per setting value: " << drawn_text(r) << '\n';
  }
  return 0;
}

int run_scenario_cmd(const std::string& name, uint32_t nodes, const Options& base, bool json) {
  Result<ScenarioResult> r = run_scenario(name, nodes, base);
  if (!r) {
    std::cerr << "loom-sim: " << r.status().message() << '\n';
    exit_now(r.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitViolation);
  }
  if (json) {
    nlohmann::json types = nlohmann::json::object();
    for (const auto& t : r->by_type) types[t.name] = {{"messages", t.messages}, {"bytes", t.bytes}};
    nlohmann::json j{{"scenario", name},
                     {"protocol", base.protocol},
                     {"nodes", nodes},
                     {"prefetch", base.hlrc.prefetch},
                     {"push_pages", base.hlrc.push_pages},
                     {"messages", r->messages},
                     {"bytes", r->bytes},
                     {"by_type", types},
                     {"steps", r->steps}};
    std::cout << j.dump() << '\n';
  } else {
    std::cout << fmt::format("{} on {} nodes ({}): {} messages, {} bytes\n", name, nodes,
                             base.protocol, r->messages, r->bytes);
    for (const auto& t : r->by_type)
      std::cout << fmt::format("  {:<22} {:>10} msgs {:>14} bytes\n", t.name, t.messages, t.bytes);
  }
  return 0;
}

// Messages and bytes of every scenario at every node count, and how they grow: the exponent k
// of messages ~ (n-1)^k between the two largest counts (1 = linear, 2 = quadratic).
int run_table(const std::vector<uint32_t>& counts, const Options& base, bool json) {
  nlohmann::json out = nlohmann::json::array();
  auto growth = [&](const std::vector<uint64_t>& v) {
    if (v.size() < 2) return 0.0;
    size_t a = v.size() - 2, b = v.size() - 1;
    if (v[a] == 0 || counts[a] < 2 || counts[b] <= counts[a]) return 0.0;
    // note: against n-1, the number of other nodes, which is what the thesis's formulas use.
    return std::log(static_cast<double>(v[b]) / static_cast<double>(v[a])) /
           std::log(static_cast<double>(counts[b] - 1) / static_cast<double>(counts[a] - 1));
  };
  if (!json) {
    std::string head = fmt::format("{:<16} {:<9}", "scenario", "");
    for (uint32_t n : counts) head += fmt::format(" {:>11}", fmt::format("n={}", n));
    std::cout << head << fmt::format("  {}\n", "growth");
  }
  for (const ScenarioInfo& sc : scenario_list()) {
    std::vector<uint64_t> msgs, bytes;
    for (uint32_t n : counts) {
      Result<ScenarioResult> r = run_scenario(sc.name, n, base);
      if (!r) {
        std::cerr << "loom-sim: " << sc.name << " on " << n << " nodes: " << r.status().message()
                  << '\n';
        exit_now(kExitViolation);
      }
      msgs.push_back(r->messages);
      bytes.push_back(r->bytes);
    }
    if (json) {
      out.push_back({{"scenario", sc.name},
                     {"protocol", base.protocol},
                     {"prefetch", base.hlrc.prefetch},
                     {"push_pages", base.hlrc.push_pages},
                     {"nodes", counts},
                     {"messages", msgs},
                     {"bytes", bytes},
                     {"messages_growth_exponent", growth(msgs)},
                     {"bytes_growth_exponent", growth(bytes)}});
      continue;
    }
    std::string m = fmt::format("{:<16} {:<9}", sc.name, "messages");
    std::string k = fmt::format("{:<16} {:<9}", "", "KiB");
    for (size_t i = 0; i < counts.size(); ++i) {
      m += fmt::format(" {:>11}", msgs[i]);
      k += fmt::format(" {:>11}", bytes[i] / 1024);
    }
    std::cout << m << fmt::format("  (n-1)^{:.2f}\n", growth(msgs)) << k
              << fmt::format("  (n-1)^{:.2f}\n", growth(bytes));
  }
  if (json) std::cout << out.dump() << '\n';
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Runs Loom's protocols for simulated nodes in one process, deterministically.",
               "loom-sim");
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.footer(
      "Exit status: 0 success; 1 a violation or failed run (seed and trace printed); 2 a "
      "usage error. See docs/sim.md.");
  std::optional<uint64_t> check;
  uint64_t seed = 1;
  std::string protocol = "hlrc", mutant, scenario;
  std::optional<std::string> litmus_name;
  uint32_t nodes = 0;
  bool json = false, trace = false, list_scenarios = false, list_mutants = false,
       list_litmus = false, no_prefetch = false;
  app.add_option("--check", check, "Check K programs with the consistency checker")
      ->option_text("K");
  app.add_option("--seed", seed, "First seed (programs use seed, seed+1, ...)")->option_text("S");
  uint64_t schedules = 1;
  app.add_option("--schedules", schedules, "With --check: run each program under M schedules")
      ->option_text("M");
  app.add_option("--protocol", protocol,
                 "Consistency protocol of every allocation (loomrun --list-protocols names them)")
      ->option_text("P");
  app.add_option("--mutant", mutant, "Use a deliberately broken protocol variant (--list-mutants)")
      ->option_text("NAME");
  app.add_option("--litmus", litmus_name, "With --check: run only this litmus test")
      ->option_text("NAME");
  app.add_option("--scenario", scenario, "Run a communication scenario (--list-scenarios)")
      ->option_text("NAME");
  app.add_option("--nodes", nodes, "Simulated nodes for --scenario")->option_text("N");
  bool table = false;
  std::vector<uint32_t> table_nodes = {2, 3, 4, 5, 6, 7, 8, 64, 256, 1024};
  app.add_flag("--table", table,
               "Every scenario at every node count of --table-nodes, with the growth in n");
  app.add_option("--table-nodes", table_nodes, "Node counts for --table (default 2..8,64,256,1024)")
      ->delimiter(',')
      ->option_text("N,N,...");
  app.add_flag("--json", json, "Print one JSON object");
  std::string settings_mode = "vary";
  app.add_option("--settings", settings_mode,
                 "With --check: vary draws each program's settings from its seed (those not given "
                 "as flags); default runs every program with the defaults and the flags")
      ->check(CLI::IsMember({"vary", "default"}))
      ->capture_default_str();
  // Every setting that changes what a protocol does has a flag (sim/settings.h).
  const Options defaults;
  std::map<std::string, uint64_t> setting_flags;
  for (const Setting& st : settings()) {
    uint64_t& v = setting_flags[std::string(st.name)] = st.get(defaults);
    app.add_option("--" + std::string(st.name), v, std::string(st.what))
        ->check(CLI::Range(st.min, st.max))
        ->capture_default_str()
        ->option_text(st.max == 1 ? "0|1" : "N");
  }
  app.add_flag("--no-prefetch", no_prefetch, "The same as --prefetch 0")->excludes("--prefetch");
  app.add_flag("--trace", trace, "Print every event of the run (stderr)");
  app.add_flag("--list-scenarios", list_scenarios, "List the scenarios");
  app.add_flag("--list-mutants", list_mutants, "List the protocol mutants");
  app.add_flag("--list-litmus", list_litmus, "List the litmus tests");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    return usage_error(fmt::format("{} (see loom-sim --help)", e.what()));
  }

  if (list_scenarios) {
    for (const ScenarioInfo& s : scenario_list())
      std::cout << fmt::format("{:<18} {}\n", s.name, s.what);
    return 0;
  }
  if (list_mutants) {
    for (const MutantInfo& m : mutants()) std::cout << fmt::format("{:<18} {}\n", m.name, m.what);
    return 0;
  }
  if (list_litmus) {
    for (const std::string& n : litmus_names()) std::cout << n << '\n';
    return 0;
  }
  if (protocols::protocol_id(protocol) == memory::kProtocolUnknown)
    return usage_error(fmt::format("--protocol {}: unknown protocol (available: {})", protocol,
                                   fmt::join(protocols::protocol_names(), ", ")));
  Options base;
  base.print_trace = trace;
  base.protocol = protocol;
  std::set<std::string> fixed;  // settings given on the command line
  for (const Setting& st : settings()) {
    if (app.count("--" + std::string(st.name)) == 0) continue;
    st.set(base, setting_flags[std::string(st.name)]);
    fixed.insert(std::string(st.name));
  }
  if (no_prefetch) {
    find_setting("prefetch")->set(base, 0);
    fixed.insert("prefetch");
  }
  if (!mutant.empty()) {
    const MutantInfo* m = find_mutant(mutant);
    if (m == nullptr)
      return usage_error(fmt::format("--mutant {}: no such mutant (see --list-mutants)", mutant));
    if (m->protocol != protocol)
      return usage_error(fmt::format("--mutant {} breaks {}: add --protocol {}", mutant,
                                     m->protocol, m->protocol));
    base.hlrc.mutant = m->mutant;
    base.lrc_mutant = m->lrc;
    base.single_mutant = m->single;
    base.object_no_view = m->object_no_view;
  }
  if (litmus_name) {
    const auto& names = litmus_names();
    if (std::find(names.begin(), names.end(), *litmus_name) == names.end())
      return usage_error(
          fmt::format("--litmus {}: no such litmus test (see --list-litmus)", *litmus_name));
  }
  if ((check ? 1 : 0) + (scenario.empty() ? 0 : 1) + (table ? 1 : 0) > 1)
    return usage_error("--check, --scenario and --table exclude each other");
  if (table) {
    if (table_nodes.empty()) return usage_error("--table-nodes: no node counts");
    for (uint32_t n : table_nodes)
      if (n < 2)
        return usage_error(fmt::format("--table-nodes: {} nodes (every scenario needs 2)", n));
    return run_table(table_nodes, base, json);
  }
  if (check) {
    if (*check == 0) return usage_error("--check 0: nothing to check");
    if (schedules == 0) return usage_error("--schedules 0: nothing to run");
    BatchOptions batch;
    batch.count = *check;
    batch.seed = seed;
    batch.schedules = schedules;
    batch.litmus = litmus_name;
    batch.mode = settings_mode == "vary" ? SettingsMode::kVary : SettingsMode::kDefault;
    batch.fixed = std::move(fixed);
    batch.base = base;
    return run_check(batch, mutant, json);
  }
  if (!scenario.empty()) {
    if (nodes == 0) return usage_error("--scenario needs --nodes N (N >= 1)");
    base.seed = seed;
    return run_scenario_cmd(scenario, nodes, base, json);
  }
  return usage_error("nothing to do: give --check K or --scenario NAME (see loom-sim --help)");
}

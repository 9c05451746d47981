// loom-sim: runs Loom's protocol and synchronization code for many simulated nodes in one
// process, deterministically (docs/sim.md).
//
//   loom-sim --check K [--seed S] [--schedules M] [--protocol P] [--mutant NAME] [--litmus NAME]
//            [--lrc-gc-bytes B] [--lock-fairness N] [--lock-keep 0|1] [--trace]
//       checks K programs (seeds S, S+1, ...: random data-race-free programs and litmus tests),
//       each under M schedules, with the consistency checker; exit 0 only if there was no
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
#include <nlohmann/json.hpp>
#include <optional>

#include "sim/programs.h"
#include "sim/scenarios.h"

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

// The lock policy's flags for a replay command line, where they differ from the defaults.
std::string lock_flags(const Options& o) {
  std::string out;
  if (o.lock_fairness != Options().lock_fairness)
    out += fmt::format(" --lock-fairness {}", o.lock_fairness);
  if (o.lock_keep != Options().lock_keep)
    out += fmt::format(" --lock-keep {}", o.lock_keep ? 1 : 0);
  return out;
}

// Runs programs seed..seed+count-1, each under `schedules` schedules: the first with the
// program's own seed, the others with seeds derived from it.
int run_check(uint64_t count, uint64_t seed, uint64_t schedules,
              const std::optional<std::string>& litmus_name, const std::string& mutant,
              const Options& base, bool json) {
  uint64_t reads = 0, writes = 0, messages = 0, litmus_runs = 0;
  uint64_t fingerprint = 0;  // of every run's trace: equal for equal seeds
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t s = seed + i;
    Program p = litmus_name ? litmus(*litmus_name) : batch_program(s);
    if (litmus_name || s % 4 == 0) ++litmus_runs;
    for (uint64_t j = 0; j < schedules; ++j) {
      Options o = base;
      o.seed = j == 0 ? s : s ^ (j * 0x9e3779b97f4a7c15ull);
      CheckStats st;
      Status r = check_program(p, o, &st);
      if (!r) {
        std::cerr << "loom-sim: " << r.message() << '\n'
                  << fmt::format(
                         "loom-sim: {} runs passed before this one; replay with: loom-sim "
                         "--check 1 --seed {}{}{}{}{}{}{}{}{} --trace\n",
                         i * schedules + j, s,
                         schedules > 1 ? fmt::format(" --schedules {}", j + 1) : "",
                         litmus_name ? " --litmus " + *litmus_name : "",
                         base.protocol == "hlrc" ? "" : " --protocol " + base.protocol,
                         base.hlrc.migrate_after == protocols::hlrc::Hlrc::Options().migrate_after
                             ? ""
                             : fmt::format(" --home-migration {}", base.hlrc.migrate_after),
                         mutant.empty() ? "" : " --mutant " + mutant,
                         base.hlrc.push_pages == protocols::hlrc::Hlrc::Options().push_pages
                             ? ""
                             : fmt::format(" --push-pages {}", base.hlrc.push_pages),
                         std::string(base.lazy_release ? "" : " --lazy-release 0") +
                             (base.hlrc.causal_fetch ? " --causal-fetch 1" : ""),
                         lock_flags(base));
        exit_now(kExitViolation);
      }
      reads += st.reads;
      writes += st.writes;
      messages += st.messages;
      fingerprint = fingerprint * 1000003 + st.trace_hash;
    }
  }
  if (json) {
    nlohmann::json j{{"checked", count},
                     {"schedules", schedules},
                     {"runs", count * schedules},
                     {"litmus", litmus_runs},
                     {"random", count - litmus_runs},
                     {"reads_checked", reads},
                     {"writes", writes},
                     {"messages", messages},
                     {"violations", 0},
                     {"seed", seed},
                     {"trace_fingerprint", fmt::format("{:016x}", fingerprint)}};
    std::cout << j.dump() << '\n';
  } else {
    std::cout << fmt::format(
        "checked {} programs ({} random, {} litmus) x {} schedules from seed {}: {} reads "
        "verified, {} writes, {} messages; no violation (trace fingerprint {:016x})\n",
        count, count - litmus_runs, litmus_runs, schedules, seed, reads, writes, messages,
        fingerprint);
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
  uint64_t lrc_gc_bytes = 0;
  uint32_t home_migration = protocols::hlrc::Hlrc::Options().migrate_after;
  uint32_t push_pages = protocols::hlrc::Hlrc::Options().push_pages;
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
  app.add_flag("--no-prefetch", no_prefetch,
               "Do not prefetch invalidated pages at acquires (LOOM_PREFETCH=0)");
  app.add_option("--lrc-gc-bytes", lrc_gc_bytes,
                 "lrc_mw: diff bytes a node keeps before asking for a collection "
                 "(LOOM_LRC_GC_BYTES; 1: at every barrier)")
      ->check(CLI::PositiveNumber);
  app.add_option("--push-pages", push_pages,
                 "Barrier pushes: pages per reader and barrier (LOOM_PUSH_PAGES; 0: off)")
      ->check(CLI::Range(0, 4096));
  int lazy_release = 1;
  int causal_fetch = protocols::hlrc::Hlrc::Options().causal_fetch ? 1 : 0;
  app.add_option("--causal-fetch", causal_fetch,
                 "hlrc: learn a fetched copy's writers' notices first (LOOM_CAUSAL_FETCH)")
      ->check(CLI::Range(0, 1));
  app.add_option("--lazy-release", lazy_release,
                 "Locks release only when their token leaves the node (LOOM_LAZY_RELEASE; 0: at "
                 "every unlock)")
      ->check(CLI::Range(0, 1));
  uint32_t lock_fairness = Options().lock_fairness;
  int lock_keep = Options().lock_keep ? 1 : 0;
  app.add_option("--lock-fairness", lock_fairness,
                 "Local acquisitions of a lock in a row while another node waits "
                 "(LOOM_LOCK_FAIRNESS)")
      ->check(CLI::Range(1, 1 << 20))
      ->option_text("N (default " + std::to_string(lock_fairness) + ")");
  app.add_option("--lock-keep", lock_keep,
                 "An unlock may keep a token another node waits for, until its timer fires "
                 "(LOOM_LOCK_KEEP_US > 0; the simulation has no clock)")
      ->check(CLI::Range(0, 1))
      ->option_text("0|1 (default " + std::to_string(lock_keep) + ")");
  app.add_option("--home-migration", home_migration,
                 "hlrc: diffs in a row from one node after which a home offers it the page "
                 "(LOOM_HOME_MIGRATION; 0: homes never move)")
      ->capture_default_str()
      ->option_text("N");
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
  base.hlrc.prefetch = !no_prefetch;
  base.hlrc.migrate_after = home_migration;
  base.hlrc.push_pages = push_pages;
  base.lazy_release = lazy_release != 0;
  base.lock_fairness = lock_fairness;
  base.lock_keep = lock_keep != 0;
  base.hlrc.causal_fetch = causal_fetch != 0;
  base.lrc_gc_bytes = lrc_gc_bytes;
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
    return run_check(*check, seed, schedules, litmus_name, mutant, base, json);
  }
  if (!scenario.empty()) {
    if (nodes == 0) return usage_error("--scenario needs --nodes N (N >= 1)");
    base.seed = seed;
    return run_scenario_cmd(scenario, nodes, base, json);
  }
  return usage_error("nothing to do: give --check K or --scenario NAME (see loom-sim --help)");
}

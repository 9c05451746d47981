#include "options.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <optional>

#include "base/config.h"
#include "protocols/protocol.h"
#include "sys.h"

extern char** environ;

namespace loom::loomrun {
namespace {

// Rows whose flags loomrun defines itself, with launcher semantics.
bool launcher_owned(const ConfigRow& row) {
  std::string_view name = row.name;
  return name == "STATS" || name == "STATS_JSON";
}

// The table's parser says "LOOM_X='text': expected ..."; keep the "expected ..." part so the
// message can name the flag instead.
std::string expectation(const Status& s, const ConfigRow& row, std::string_view text) {
  std::string prefix = fmt::format("{}='{}': ", config_env_name(row), text);
  const std::string& m = s.message();
  if (m.compare(0, prefix.size(), prefix) == 0) return m.substr(prefix.size());
  return m;
}

std::optional<double> parse_seconds(const std::string& text, bool allow_zero) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || *end != '\0' || !std::isfinite(v) || v < 0 || (!allow_zero && v == 0) ||
      v > 1e7)
    return std::nullopt;
  return v;
}

std::optional<uint32_t> parse_nodes(const std::string& text) {
  if (text.empty() || text.size() > 7) return std::nullopt;
  uint32_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  if (v < 1 || v > kMaxNodes) return std::nullopt;
  return v;
}

int usage_error(std::string_view msg) {
  say(msg);
  return kUsageError;
}

}  // namespace

std::variant<Options, int> parse_options(int argc, char** argv) {
  Options opts;
  CLI::App app("Starts a Loom job of N nodes on this machine and brokers their bootstrap.",
               "loomrun");
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.footer(
      "Usage: loomrun -n N [options] program [args...]\n"
      "Options end at the program name; its arguments are passed on untouched.\n"
      "Exit status: 0 if every node exits 0; else the first failing node's status (128+signal\n"
      "for a signal); 124 on --timeout; 2 for a usage error. See docs/launcher.md.");

  std::string nodes_text, timeout_text, grace_text, stdin_text, bind_text;
  bool help_config = false;
  app.add_option("-n,--np", nodes_text, "Number of nodes to start (1 to 1024)")->option_text("N");
  app.add_flag("--tag-output,--prefix", opts.tag_output,
               "Prefix every line a node prints with \"[rank] \"");
  app.add_option("--timeout", timeout_text,
                 "Stop the job after SECONDS (SIGTERM, grace, SIGKILL) and exit 124")
      ->option_text("SECONDS");
  app.add_option("--kill-grace", grace_text,
                 "Seconds nodes get to exit after a failure, timeout or signal before SIGKILL "
                 "(default 2)")
      ->option_text("SECONDS");
  app.add_option("--stdin", stdin_text,
                 "The node that reads loomrun's stdin: a rank, or none (default 0, the node that "
                 "runs main; the others read /dev/null)")
      ->option_text("RANK|none");
  app.add_option("--bind", bind_text,
                 "auto (default): when the nodes are no more than the CPUs loomrun may use, node r "
                 "runs on the r-th of as many equal contiguous shares of them (as mpirun binds "
                 "ranks); none: every node on all of them")
      ->option_text("auto|none");
  app.add_flag("--stats", opts.stats, "Every node prints its counters at exit (LOOM_STATS=1)");
  app.add_option("--stats-json", opts.stats_json,
                 "Collect every node's counters into FILE as {\"nodes\": [...]}")
      ->option_text("FILE");
  app.add_flag("--help-config", help_config, "Print the configuration table and exit");
  bool list_protocols = false;
  app.add_flag("--list-protocols", list_protocols,
               "Print the built-in consistency protocols, one per line, and exit");

  // One flag per configuration row.
  struct RowFlag {
    const ConfigRow* row;
    std::string text;
    CLI::Option* opt;
  };
  std::vector<RowFlag> row_flags;
  auto table = config_table();
  row_flags.reserve(table.size());
  for (const ConfigRow& row : table) {
    if (row.internal || launcher_owned(row)) continue;
    row_flags.push_back({&row, {}, nullptr});
    RowFlag& rf = row_flags.back();
    rf.opt = app.add_option(config_flag_name(row), rf.text, row.meaning)
                 ->option_text("VALUE")
                 ->group("Configuration (sets LOOM_* for the nodes; see --help-config)");
  }
  app.prefix_command();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    return usage_error(fmt::format("{} (see loomrun --help)", e.what()));
  }

  if (help_config) {
    std::cout << format_config_table();
    return 0;
  }
  if (list_protocols) {
    for (const std::string& name : protocols::protocol_names()) std::cout << name << '\n';
    return 0;
  }

  std::vector<std::string> rest = app.remaining();
  if (!rest.empty() && rest.front() == "--")
    rest.erase(rest.begin());
  else if (!rest.empty() && rest.front().size() > 1 && rest.front()[0] == '-')
    return usage_error(fmt::format("unknown option '{}' (see loomrun --help)", rest.front()));

  if (nodes_text.empty()) return usage_error("missing -n N, the number of nodes to start");
  auto nodes = parse_nodes(nodes_text);
  if (!nodes)
    return usage_error(
        fmt::format("-n {}: expected a number of nodes from 1 to {}", nodes_text, kMaxNodes));
  opts.nodes = *nodes;

  if (stdin_text == "none") {
    opts.stdin_rank = kNoStdin;
  } else if (!stdin_text.empty()) {
    uint32_t rank = 0;
    auto [end, ec] =
        std::from_chars(stdin_text.data(), stdin_text.data() + stdin_text.size(), rank);
    if (ec != std::errc() || end != stdin_text.data() + stdin_text.size() || rank >= opts.nodes)
      return usage_error(fmt::format("--stdin={}: expected none or a rank from 0 to {}", stdin_text,
                                     opts.nodes - 1));
    opts.stdin_rank = rank;
  }

  if (bind_text == "none") {
    opts.bind = Bind::kNone;
  } else if (!bind_text.empty() && bind_text != "auto") {
    return usage_error(fmt::format("--bind={}: expected auto or none", bind_text));
  }

  if (!timeout_text.empty()) {
    auto t = parse_seconds(timeout_text, /*allow_zero=*/false);
    if (!t)
      return usage_error(
          fmt::format("--timeout={}: expected a number of seconds greater than 0", timeout_text));
    opts.timeout_s = *t;
  }
  if (!grace_text.empty()) {
    auto g = parse_seconds(grace_text, /*allow_zero=*/true);
    if (!g || *g > 3600)
      return usage_error(
          fmt::format("--kill-grace={}: expected a number of seconds from 0 to 3600", grace_text));
    opts.kill_grace_s = *g;
  }

  for (const RowFlag& rf : row_flags) {
    if (rf.opt->count() == 0) continue;
    std::string value;
    Status s = parse_config_value(*rf.row, rf.text, &value);
    if (!s)
      return usage_error(fmt::format("{}={}: {}", config_flag_name(*rf.row), rf.text,
                                     expectation(s, *rf.row, rf.text)));
    opts.settings[config_env_name(*rf.row)] = value;
  }
  if (opts.stats) opts.settings["LOOM_STATS"] = "1";
  // A loomrun job runs on this machine only, so UCX needs no network device but loopback. Left
  // to choose, its TCP transport listens on every interface, where anyone on the network could
  // connect (docs/comm.md, "Trust"). --net-devices, LOOM_NET_DEVICES or UCX_NET_DEVICES (even
  // empty: all devices) choose otherwise.
  if (opts.settings.count("LOOM_NET_DEVICES") == 0 && std::getenv("LOOM_NET_DEVICES") == nullptr &&
      std::getenv("UCX_NET_DEVICES") == nullptr)
    opts.settings["LOOM_NET_DEVICES"] = "lo";

  if (rest.empty())
    return usage_error("no program to run (usage: loomrun -n N [options] program [args...])");
  opts.command = std::move(rest);
  return opts;
}

bool check_environment(const Options& options) {
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    if (kv.substr(0, 5) != "LOOM_") continue;
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    std::string_view var = kv.substr(0, eq);
    std::string_view text = kv.substr(eq + 1);
    const ConfigRow* row = find_config_row(var.substr(5));
    if (row == nullptr) {
      warn(fmt::format("unknown setting {} in the environment (see loomrun --help-config)", var));
      continue;
    }
    // loomrun sets the internal rows itself; a flag overrides the environment.
    if (row->internal || options.settings.count(std::string(var)) > 0) continue;
    if (launcher_owned(*row) && !options.stats_json.empty() && var == "LOOM_STATS_JSON") continue;
    std::string value;
    Status s = parse_config_value(*row, text, &value);
    if (!s) {
      say(fmt::format("{}={}: {}", var, text, expectation(s, *row, text)));
      return false;
    }
  }
  return true;
}

}  // namespace loom::loomrun

namespace loom::loomrun {

int64_t node_setting_int(const Options& options, std::string_view name) {
  const ConfigRow* row = find_config_row(name);
  if (row == nullptr) return 0;
  std::string var = config_env_name(*row);
  std::string text = row->default_value;
  if (auto it = options.settings.find(var); it != options.settings.end()) {
    text = it->second;
  } else if (const char* env = std::getenv(var.c_str()); env != nullptr) {
    text = env;
  }
  std::string value;
  if (!parse_config_value(*row, text, &value)) return 0;
  return std::strtoll(value.c_str(), nullptr, 10);
}

}  // namespace loom::loomrun

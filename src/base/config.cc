#include "base/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "base/log.h"

extern char** environ;

namespace loom {
namespace {

constexpr int64_t kKiB = 1024;

// The one table. README's configuration table is generated from `loomrun --help-config`.
const ConfigRow kRows[] = {
    {"LOG_LEVEL", ConfigType::kEnum, "warn",
     "Messages printed to stderr: error, warn, info or debug.", "error|warn|info|debug"},
    {"TRACE", ConfigType::kBool, "0",
     "Print every message sent and received with its type's printer."},
    {"STATS", ConfigType::kBool, "0",
     "Print this node's counters (messages and bytes per type, shared memory) at exit."},
    {"STATS_JSON", ConfigType::kString, "",
     "Write this node's counters as JSON to this path at exit ('%r' is replaced by the rank)."},
    {"BOOTSTRAP", ConfigType::kEnum, "auto",
     "How a node finds its job: loomrun, pmix (mpirun, srun), single (one node), or auto.",
     "auto|loomrun|pmix|single"},
    {"TRANSPORTS", ConfigType::kString, "",
     "UCX transports to use (sets UCX_TLS), e.g. 'tcp' or 'shm,self'. Empty: UCX chooses."},
    {"NET_DEVICES", ConfigType::kString, "",
     "Network devices UCX may use (sets UCX_NET_DEVICES), e.g. 'eth0'. Empty: all "
     "(loomrun: 'lo' unless this or UCX_NET_DEVICES is set)."},
    {"UCX_ERR_HANDLING", ConfigType::kBool, "1",
     "Turn on UCX peer error handling so a dead peer fails its endpoint instead of hanging."},
    {"SPIN_US", ConfigType::kInt, "50",
     "How long the server thread keeps polling after its last event before it sleeps (us).", "", 0,
     1000000},
    {"SPIN_WHILE_COMPUTING", ConfigType::kBool, "0",
     "Let the server thread spin (SPIN_US) even while this node's application threads compute. "
     "Off: it sleeps at once then, so it does not take their cores; turn on where every node "
     "has a spare core."},
    {"WAIT_SPIN_US", ConfigType::kInt, "100",
     "How long an application thread waiting for a reply polls before it sleeps (us).", "", 0,
     1000000},
    {"HEARTBEAT_MS", ConfigType::kInt, "500",
     "Keepalive: every this many ms a node sends a heartbeat to the next MONITOR_PEERS ranks.", "",
     10, 3600000},
    {"PEER_TIMEOUT_MS", ConfigType::kInt, "4000",
     "A monitored peer silent for this long is declared failed and the job stops (ms).", "", 50,
     86400000},
    {"MONITOR_PEERS", ConfigType::kInt, "4",
     "Each node watches this many preceding ranks (and heartbeats as many following ones).", "", 1,
     1024},
    {"STARTUP_TIMEOUT_MS", ConfigType::kInt, "60000",
     "Start-up (bootstrap and connection set-up): a node that does not reach its next start-up "
     "step this long after its previous one (or after it was started) is declared failed, and "
     "the job stops naming it and the step (ms).",
     "", 100, 86400000},
    {"SHUTDOWN_TIMEOUT_MS", ConfigType::kInt, "10000",
     "Shutdown: once every node has finished (the first shutdown barrier), a node that does not "
     "reach the next shutdown step within this is declared failed, and a node whose own "
     "shutdown takes longer stops itself (ms).",
     "", 100, 86400000},
    {"STALL_REPORT_MS", ConfigType::kInt, "5000",
     "A page fault that has waited this long (for its page's reply, another thread's fetch, "
     "diffs its notices announced or a home offer's answer) prints a warning with the page's "
     "state, once per fault, and goes on waiting (ms).",
     "", 1, 86400000},
    {"MAX_INFLIGHT", ConfigType::kInt, "256",
     "Flow control: unfinished sends per peer before a sending application thread waits.", "", 1,
     1 << 20},
    {"MAX_INFLIGHT_BYTES", ConfigType::kSize, "32M",
     "Flow control: unfinished bytes per peer before a sending application thread waits.", "",
     64 * kKiB, INT64_MAX},
    {"MALLOC_TUNING", ConfigType::kBool, "1",
     "Keep freed large buffers in the heap (glibc M_MMAP_THRESHOLD 4 MiB, M_TRIM_THRESHOLD 1 GiB) "
     "so large messages do not fault in fresh pages each time; 0 keeps glibc's defaults."},
    {"REGION_BASE", ConfigType::kSize, "0x200000000000",
     "Virtual address of the shared region, the same on every node (page-aligned).", "", 1 << 16,
     INT64_MAX},
    {"REGION_SIZE", ConfigType::kSize, "64G",
     "Size of the shared region (a multiple of 4 MiB). Reserving costs nothing until pages are "
     "touched.",
     "", 4 << 20, INT64_MAX},
    {"WRITE_DETECT", ConfigType::kEnum, "auto",
     "How a home finds its writes to pages other nodes read: uffd (the kernel records them, no "
     "signal: userfaultfd asynchronous write protection and PAGEMAP_SCAN, Linux 6.7), mprotect "
     "(a fault per page and interval), or auto (uffd where the kernel allows it).",
     "auto|uffd|mprotect"},
    {"PROTOCOL", ConfigType::kString, "hlrc",
     "Consistency protocol of allocations that name none (loomrun --list-protocols): hlrc, "
     "sc_mrsw, erc_sw, lrc_mw, or one the program registers. The same on every node."},
    {"LRC_GC_BYTES", ConfigType::kSize, "64M",
     "lrc_mw: when a node keeps this many bytes of diffs, the next barrier asks every node to "
     "validate its copies, and the barrier after that drops the diffs every node has applied.",
     "", 1, INT64_MAX},
    {"OWNER_HOLD_US", ConfigType::kInt, "20",
     "sc_mrsw and erc_sw: how long a node keeps a page it got write access to after the thread "
     "that waited for it resumed, before serving requests that queued meanwhile.",
     "", 0, 1000000},
    {"PREFETCH", ConfigType::kBool, "1",
     "At an acquire, fetch again at once the pages it invalidates that this node was reading, "
     "instead of at their next fault."},
    {"PUSH_PAGES", ConfigType::kInt, "16",
     "hlrc: at a barrier, a home sends each node that reads a page it wrote a copy of the page "
     "with the release (barrier pushes), up to this many pages per node and barrier. 0: off.",
     "", 0, 4096},
    {"CAUSAL_FETCH", ConfigType::kBool, "0",
     "hlrc: a fetched copy that holds writes this node has no write notice of is used only after "
     "the node has learned its writers' notices, so that programs that read racily (a tree "
     "descent that follows pointers without locks) see what a pointer's writer wrote before it.",
     ""},
    {"FETCH_AHEAD", ConfigType::kInt, "8",
     "hlrc: a thread that faults on pages in ascending order gets up to this many of the "
     "following pages of the same home with the same request (readahead); an acquire's prefetches "
     "go to each home in batches. 0: one page per request.",
     "", 0, 15},
    {"FIRST_TOUCH_RUN", ConfigType::kInt, "16",
     "hlrc, on a job of one node: a first touch of a page also opens the untouched pages of its "
     "allocation after it, up to this many pages in all: one trap per run. (With other nodes "
     "first touch places each page at its own first toucher.) 1: one page per trap.",
     "", 1, 256},
    {"WRITE_AHEAD", ConfigType::kInt, "16",
     "hlrc: a thread whose writes fault on read-only copies in ascending order gets up to this "
     "many of the following read-only copies twinned and opened for writing with the one it "
     "faulted on (one trap and one mprotect per run); a release finds the unwritten ones "
     "unchanged and announces nothing for them. 0: one page per fault.",
     "", 0, 64},
    {"HOME_MIGRATION", ConfigType::kInt, "2",
     "hlrc: a home that applies this many diffs in a row from one other node (no other write in "
     "between) offers that node the page's home. 0: homes never move.",
     "", 0, 1 << 20},
    {"HOT_IDLE_RELEASES", ConfigType::kInt, "4",
     "hlrc with write tracking (WRITE_DETECT uffd): a home page tracked without faults goes back "
     "to write protection (its next write faults) after this many releases in a row that found "
     "it unwritten. Fewer: less to scan at each release, and pages other nodes write move to "
     "them sooner (a tracked page is not offered); more: fewer faults for pages the home writes "
     "now and then.",
     "", 1, 1 << 20},
    {"THIN_OFFERS", ConfigType::kBool, "1",
     "hlrc, home migration: a home offers a page without its bytes; the writer takes it if its "
     "copy is at the master's version and asks for the bytes otherwise. 0: every offer carries "
     "the page.",
     ""},
    {"LAZY_RELEASE", ConfigType::kBool, "1",
     "Locks release only when their token leaves the node (an unlock that keeps the lock on the "
     "node releases nothing). 0: every unlock releases.",
     ""},
    {"LOCK_FAIRNESS", ConfigType::kInt, "4",
     "While another node waits for a lock, this node's threads take it at most this many times "
     "in a row (handoffs to waiting threads, and takes of a token kept by LOCK_KEEP_US) before "
     "the token goes to that node.",
     "", 1, 1 << 20},
    {"LOCK_KEEP_US", ConfigType::kInt, "50",
     "While another node waits for a lock, an unlock that finds no waiting thread on this node "
     "may keep the token idle here for up to this long (from the first such unlock), for a "
     "thread of this node that locks again soon, within LOCK_FAIRNESS; only for locks this node "
     "came back for soon after they last left. 0: the token leaves at once (strict handoff).",
     "", 0, 1000000},
    {"LOCK_PUSH", ConfigType::kBool, "0",
     "A lock's manager sends the token ahead, with its next release, to the node the lock "
     "alternates with (it went there and came back from there 3 times in a row), so that node's "
     "next lock finds it cached; backs off while pushed tokens go unused. Helps programs whose "
     "locks alternate regularly between two nodes (WATER), costs others (BARNES).",
     ""},
    {"PM_PLACEMENT", ConfigType::kEnum, "block",
     "PARMACS programs: where CREATE puts threads. block: consecutive threads on one node "
     "(PM_THREADS_PER_NODE each, or n/nodes for CREATE(fn, n)); cyclic: thread i on node i mod n.",
     "block|cyclic"},
    {"PM_ASLR", ConfigType::kBool, "0",
     "PARMACS programs: keep address-space randomization. By default each node process "
     "re-executes itself once without it, so shared libraries map at the same addresses on every "
     "node."},
    {"PM_THREADS_PER_NODE", ConfigType::kInt, "0",
     "PARMACS programs, block placement with one CREATE per thread: threads per node (0: unknown, "
     "place cyclically).",
     "", 0, 1 << 20},
    {"BOOT_ADDR", ConfigType::kString, "", "Set by loomrun: its bootstrap socket.", "", 0, 0, true},
    {"FAULT_INJECT", ConfigType::kString, "",
     "Tests only: 'RANK:POINT:ACTION' makes node RANK kill, stop or exit itself at a point of its "
     "start-up or shutdown (runtime/fault_inject.h).",
     "", 0, 0, true},
    {"JOB_TOKEN", ConfigType::kString, "", "Set by loomrun: the job's random token.", "", 0, 0,
     true},
    {"RANK", ConfigType::kInt, "-1", "Set by loomrun: this node's rank.", "", -1, 1 << 24, true},
    {"SIZE", ConfigType::kInt, "0", "Set by loomrun: the number of nodes.", "", 0, 1 << 24, true},
};

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return out;
}

Status bad_value(const ConfigRow& row, std::string_view text, std::string_view expected) {
  return Status::invalid_argument(
      fmt::format("{}='{}': expected {}", config_env_name(row), text, expected));
}

Status parse_int(const ConfigRow& row, std::string_view text, bool size_suffix, int64_t* out) {
  std::string s(text);
  if (s.empty()) return bad_value(row, text, size_suffix ? "a size like 64K or 32M" : "an integer");
  char* end = nullptr;
  errno = 0;
  // Sizes and addresses may be written in hex (0x...).
  bool hex = size_suffix && s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
  long long v = std::strtoll(s.c_str(), &end, hex ? 16 : 10);
  if (end == s.c_str() || errno == ERANGE)
    return bad_value(row, text, size_suffix ? "a size like 64K or 32M" : "an integer");
  int64_t mult = 1;
  std::string_view rest(end);
  if (size_suffix && !rest.empty()) {
    char c = static_cast<char>(std::toupper(static_cast<unsigned char>(rest[0])));
    if (c == 'K')
      mult = kKiB;
    else if (c == 'M')
      mult = kKiB * kKiB;
    else if (c == 'G')
      mult = kKiB * kKiB * kKiB;
    else if (c == 'T')
      mult = kKiB * kKiB * kKiB * kKiB;
    else
      return bad_value(row, text, "a size like 64K or 32M");
    rest.remove_prefix(1);
    if (rest == "B" || rest == "b" || rest == "iB") rest = {};
  }
  if (!rest.empty())
    return bad_value(row, text, size_suffix ? "a size like 64K or 32M" : "an integer");
  if (v != 0 && (v > INT64_MAX / mult || v < INT64_MIN / mult))
    return bad_value(row, text, "a smaller number");
  int64_t value = v * mult;
  if (value < row.min || value > row.max)
    return bad_value(row, text, fmt::format("a value from {} to {}", row.min, row.max));
  *out = value;
  return Status::ok();
}

}  // namespace

std::span<const ConfigRow> config_table() { return kRows; }

const ConfigRow* find_config_row(std::string_view name) {
  for (const auto& r : kRows)
    if (name == r.name) return &r;
  return nullptr;
}

std::string config_flag_name(const ConfigRow& row) {
  std::string f = fmt::format("--{}", lower(row.name));
  std::replace(f.begin(), f.end(), '_', '-');
  return f;
}

std::string config_env_name(const ConfigRow& row) { return fmt::format("LOOM_{}", row.name); }

Status parse_config_value(const ConfigRow& row, std::string_view text, std::string* out) {
  switch (row.type) {
    case ConfigType::kBool: {
      std::string t = lower(text);
      if (t == "1" || t == "y" || t == "yes" || t == "on" || t == "true")
        out->assign(1, '1');
      else if (t == "0" || t == "n" || t == "no" || t == "off" || t == "false")
        out->assign(1, '0');
      else
        return bad_value(row, text, "a boolean (1/0, yes/no, on/off, true/false)");
      return Status::ok();
    }
    case ConfigType::kInt:
    case ConfigType::kSize: {
      int64_t v = 0;
      Status s = parse_int(row, text, row.type == ConfigType::kSize, &v);
      if (!s) return s;
      *out = std::to_string(v);
      return Status::ok();
    }
    case ConfigType::kString:
      *out = std::string(text);
      return Status::ok();
    case ConfigType::kEnum: {
      std::string t = lower(text);
      std::string_view choices(row.choices);
      size_t pos = 0;
      while (pos <= choices.size()) {
        size_t bar = choices.find('|', pos);
        if (bar == std::string_view::npos) bar = choices.size();
        if (choices.substr(pos, bar - pos) == t) {
          *out = t;
          return Status::ok();
        }
        pos = bar + 1;
      }
      std::string expected = fmt::format("one of {}", row.choices);
      std::replace(expected.begin(), expected.end(), '|', ',');
      return bad_value(row, text, expected);
    }
  }
  return Status::internal("unknown config type");
}

std::string format_config_table() {
  std::string out =
      fmt::format("{:<28} {:<22} {:<8} {}\n", "variable", "loomrun flag", "default", "meaning");
  for (const auto& r : kRows) {
    if (r.internal) continue;
    std::string def = r.default_value[0] ? r.default_value : "(empty)";
    out += fmt::format("{:<28} {:<22} {:<8} {}\n", config_env_name(r), config_flag_name(r), def,
                       r.meaning);
  }
  return out;
}

Config::Config() {
  for (const auto& r : kRows) {
    std::string v;
    Status s = parse_config_value(r, r.default_value, &v);
    LOOM_CHECK(s.is_ok(), "bad default in config table: {}", s.to_string());
    values_[r.name] = v;
  }
}

Result<Config> Config::from_map(const std::map<std::string, std::string>& values) {
  Config c;
  for (const auto& [k, v] : values) {
    Status s = c.set(k, v);
    if (!s) return s;
  }
  return c;
}

Result<Config> Config::from_env() {
  Config c;
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    if (kv.substr(0, 5) != "LOOM_") continue;
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    std::string_view name = kv.substr(5, eq - 5);
    std::string_view text = kv.substr(eq + 1);
    const ConfigRow* row = find_config_row(name);
    if (row == nullptr) {
      LOOM_WARN("ignoring unknown setting LOOM_{} (see loomrun --help-config)", name);
      continue;
    }
    Status s = c.set(name, text);
    if (!s) return s;
  }
  return c;
}

Status Config::set(std::string_view name, std::string_view text) {
  const ConfigRow* row = find_config_row(name);
  if (row == nullptr) return Status::invalid_argument(fmt::format("unknown setting LOOM_{}", name));
  std::string v;
  Status s = parse_config_value(*row, text, &v);
  if (!s) return s;
  values_[row->name] = v;
  return Status::ok();
}

const std::string& Config::raw(std::string_view name) const {
  auto it = values_.find(name);
  LOOM_CHECK(it != values_.end(), "no config row named {}", name);
  return it->second;
}

bool Config::get_bool(std::string_view name) const { return raw(name) == "1"; }
int64_t Config::get_int(std::string_view name) const { return std::stoll(raw(name)); }
const std::string& Config::get_string(std::string_view name) const { return raw(name); }

}  // namespace loom

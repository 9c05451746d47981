#include "sim/settings.h"

#include <fmt/format.h>

namespace loom::sim {

namespace {

constexpr uint64_t kLrcDefaultGcBytes = uint64_t{64} << 20;  // LOOM_LRC_GC_BYTES's default

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t name_hash(std::string_view name) {
  uint64_t h = 1469598103934665603ull;
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

}  // namespace

// note: the values drawn are the default, off where the setting can be off, and the ends of its
// range that a small program can reach (a push budget of 2 pages runs out, one of 4096 never
// does); each as likely as the others.
const std::vector<Setting>& settings() {
  static const std::vector<Setting> table = {
      {"home-migration",
       "hlrc: diffs in a row from one node after which a home offers it the page "
       "(LOOM_HOME_MIGRATION; 0: homes never move)",
       "hlrc",
       0,
       1 << 20,
       {0, 1, 2, 3},
       [](const Options& o) -> uint64_t { return o.hlrc.migrate_after; },
       [](Options& o, uint64_t v) { o.hlrc.migrate_after = static_cast<uint32_t>(v); }},
      {"push-pages",
       "hlrc: barrier pushes, pages per reader and barrier (LOOM_PUSH_PAGES; 0: off)",
       "hlrc",
       0,
       4096,
       {0, 2, 16, 4096},
       [](const Options& o) -> uint64_t { return o.hlrc.push_pages; },
       [](Options& o, uint64_t v) { o.hlrc.push_pages = static_cast<uint32_t>(v); }},
      {"prefetch",
       "hlrc: prefetch the pages an acquire invalidates (LOOM_PREFETCH)",
       "hlrc",
       0,
       1,
       {0, 1},
       [](const Options& o) -> uint64_t { return o.hlrc.prefetch ? 1 : 0; },
       [](Options& o, uint64_t v) { o.hlrc.prefetch = v != 0; }},
      {"fetch-ahead",
       "hlrc: following pages a request for pages read in order brings along (LOOM_FETCH_AHEAD; "
       "0: one page per request)",
       "hlrc",
       0,
       15,
       {0, 2, 8, 15},
       [](const Options& o) -> uint64_t { return o.hlrc.fetch_ahead; },
       [](Options& o, uint64_t v) { o.hlrc.fetch_ahead = static_cast<uint32_t>(v); }},
      {"write-ahead",
       "hlrc: following read-only copies a write fault in a stream of them opens too "
       "(LOOM_WRITE_AHEAD; 0: one page per fault)",
       "hlrc",
       0,
       64,
       {0, 2, 16},
       [](const Options& o) -> uint64_t { return o.hlrc.write_ahead; },
       [](Options& o, uint64_t v) { o.hlrc.write_ahead = static_cast<uint32_t>(v); }},
      {"causal-fetch",
       "hlrc: learn a fetched copy's writers' notices first (LOOM_CAUSAL_FETCH)",
       "hlrc",
       0,
       1,
       {0, 1},
       [](const Options& o) -> uint64_t { return o.hlrc.causal_fetch ? 1 : 0; },
       [](Options& o, uint64_t v) { o.hlrc.causal_fetch = v != 0; }},
      {"lazy-release",
       "Locks release only when their token leaves the node (LOOM_LAZY_RELEASE; 0: at every "
       "unlock)",
       "",
       0,
       1,
       {0, 1},
       [](const Options& o) -> uint64_t { return o.lazy_release ? 1 : 0; },
       [](Options& o, uint64_t v) { o.lazy_release = v != 0; }},
      {"write-tracking",
       "Home pages open for writing while the frames record their writes, found at releases "
       "(LOOM_WRITE_DETECT=uffd; 0: mprotect, a fault per first write in each interval)",
       "hlrc",
       0,
       1,
       {0, 1},
       [](const Options& o) -> uint64_t { return o.write_tracking ? 1 : 0; },
       [](Options& o, uint64_t v) { o.write_tracking = v != 0; }},
      {"lock-fairness",
       "Lock hand-offs to threads of the same node before a waiting node is served "
       "(LOOM_LOCK_FAIRNESS)",
       "",
       1,
       1 << 20,
       {1, 2, 4, 64},
       [](const Options& o) -> uint64_t { return o.lock_fairness; },
       [](Options& o, uint64_t v) { o.lock_fairness = static_cast<uint32_t>(v); }},
      {"lock-keep",
       "Keep a lock's token for the node's own threads while another node waits, until the "
       "scheduler fires the window's timer (LOOM_LOCK_KEEP_US as on/off: the simulator has no "
       "clock)",
       "",
       0,
       1,
       {0, 1},
       [](const Options& o) -> uint64_t { return o.lock_keep ? 1 : 0; },
       [](Options& o, uint64_t v) { o.lock_keep = v != 0; }},
      {"lock-push",
       "The manager pushes a lock's token to the node that takes it in turn with it "
       "(LOOM_LOCK_PUSH)",
       "",
       0,
       1,
       {0, 1},
       [](const Options& o) -> uint64_t { return o.lock_push ? 1 : 0; },
       [](Options& o, uint64_t v) { o.lock_push = v != 0; }},
      {"notice-gc",
       "Write notices a node stores before a release collects every node's vector time and "
       "drops the notices all hold (Hlrc::Options::gc_threshold; no LOOM_ variable)",
       "",
       1,
       uint64_t{1} << 32,
       {16, 4096},
       [](const Options& o) -> uint64_t { return o.hlrc.gc_threshold; },
       [](Options& o, uint64_t v) { o.hlrc.gc_threshold = v; }},
      {"lrc-gc-bytes",
       "lrc_mw: diff bytes a node keeps before asking for a collection (LOOM_LRC_GC_BYTES; 1: at "
       "every barrier)",
       "lrc_mw",
       1,
       uint64_t{1} << 40,
       {1, 4096, kLrcDefaultGcBytes},
       [](const Options& o) -> uint64_t {
         return o.lrc_gc_bytes == 0 ? kLrcDefaultGcBytes : o.lrc_gc_bytes;
       },
       [](Options& o, uint64_t v) { o.lrc_gc_bytes = v; }},
      {"thin-offers",
       "hlrc: home offers without the page's bytes when the writer's copy is at the master's "
       "version (LOOM_THIN_OFFERS)",
       "hlrc",
       0,
       1,
       {0, 1},
       [](const Options& o) -> uint64_t { return o.hlrc.thin_offers ? 1 : 0; },
       [](Options& o, uint64_t v) { o.hlrc.thin_offers = v != 0; }},
      {"hot-idle",
       "hlrc with write tracking: releases in a row that find a tracked home page unwritten "
       "before it leaves the hot set (LOOM_HOT_IDLE_RELEASES)",
       "hlrc",
       1,
       1 << 20,
       {1, 4, 32},
       [](const Options& o) -> uint64_t { return o.hlrc.hot_idle_releases; },
       [](Options& o, uint64_t v) { o.hlrc.hot_idle_releases = static_cast<uint32_t>(v); }},
      // A new setting joins the draw here (lock batching: its flag, its values, its Options field).
  };
  return table;
}

const Setting* find_setting(std::string_view name) {
  for (const Setting& s : settings())
    if (s.name == name) return &s;
  return nullptr;
}

Options draw_settings(const Options& base, uint64_t program_seed,
                      const std::set<std::string>& fixed) {
  Options o = base;
  for (const Setting& s : settings()) {
    if (!s.applies_to(base.protocol) || fixed.count(std::string(s.name)) != 0) continue;
    s.set(o, s.values[splitmix(program_seed ^ name_hash(s.name)) % s.values.size()]);
  }
  return o;
}

std::string describe_settings(const Options& options) {
  std::string out;
  for (const Setting& s : settings()) {
    if (!s.applies_to(options.protocol)) continue;
    out += fmt::format("{}{}={}", out.empty() ? "" : " ", s.name, s.get(options));
  }
  return out;
}

std::string settings_flags(const Options& options) {
  std::string out = "--settings default";
  Options defaults;
  for (const Setting& s : settings()) {
    if (!s.applies_to(options.protocol) || s.get(options) == s.get(defaults)) continue;
    out += fmt::format(" --{} {}", s.name, s.get(options));
  }
  return out;
}

}  // namespace loom::sim

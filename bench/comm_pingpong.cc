// comm_pingpong: what Loom's messaging costs next to raw UCX, measured in one run, between the
// same two processes, over the same transport.
//
//   loomrun -n 2 build/bench/comm_pingpong [--json] [--reps R]
//   loomrun -n N build/bench/comm_pingpong --seconds S
//
// Figures (node 0 is the client, node 1 the server; MB = 10^6 bytes):
//   rt_<size>_hot   Comm::call: an 8-byte request answered with an 8 B / 4 KiB / 64 KiB reply,
//                   back to back, so node 1's server thread never stops polling. Mean of a batch.
//   rt_<size>_cold  the same, but the client sleeps 200 us (not counted) before each call, so
//                   node 1's server thread has used up its spin (LOOM_SPIN_US, 50 us) and sleeps
//                   in epoll: the figure includes waking it.
//   bw_4k, bw_1m    one-way Comm::send of 4 KiB messages (from a span) and 1 MiB messages
//                   (Buffer&&, one per message, allocated and filled before the clock starts)
//                   streamed to node 1, closed by a request that node 1 answers once every byte
//                   has arrived; MB/s. Node 1's allocation of each received payload is counted.
//   get_4k          Comm::get of 4 KiB from node 1's registered region, then Comm::wait.
//   idle_cpu_pct    CPU time (getrusage, all threads) node 1 uses over ~2 s with nothing to do,
//                   in percent of one core. Node 0's is reported too.
// The raw_* figures are the same round trips and streams written directly against UCP (see
// raw_ucx.h): a second UCP context and worker in the same processes, configured like Loom's, so
// the ratio Loom/raw is Loom's overhead on the transport actually in use. The raw side follows
// Loom's progress policies: its server busy-polls while hot and, when cold, spins LOOM_SPIN_US
// then sleeps on the worker's event descriptor; its client polls for up to LOOM_WAIT_SPIN_US
// before it sleeps. Its 1 MiB stream sends each message from different memory and receives into
// a 32 MiB ring, as Loom's buffers do.
//
// Method: each figure is the median over --reps repetitions (default 15) of one batch (2000 hot
// round trips, 300 cold, 10000 x 4 KiB, 128 x 1 MiB, 2000 gets), after an unmeasured warm-up.
// Every repetition measures Loom and then raw UCX, so drift of the machine affects both alike.
// While Loom is measured the raw server sleeps in poll(); while raw UCX is measured Loom's server
// threads sleep in epoll (100 ms tick).
//
// --profile S: node 0 makes Loom hot round trips of 8 B for S seconds and prints their mean (no
// raw UCX, no other figure): a steady loop of the message fast path to run under `perf`.
//
// --seconds S: no measurement. Every node (any number >= 1) calls the other nodes round robin
// (itself when alone) from two threads for S seconds, checking every echoed reply, then
// finalizes and exits 0. Used by failure tests that kill or stop a node meanwhile.
//
// Output: a table on node 0's stdout, or with --json one JSON object (node 0 only; ratio_* are
// Loom/raw). Bad arguments: one line on stderr, exit status 2. Results and how to read them on a
// small VM: bench/RESULTS.md.
#include <fmt/format.h>
#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "loom/loom.hpp"
#include "raw_ucx.h"
#include "runtime/runtime.h"

namespace loom::bench {
namespace {

using comm::Buffer;
using comm::Incoming;
using comm::NodeId;

constexpr char kUsage[] =
    "usage: comm_pingpong [--json] [--reps R] [--seconds S] [--profile S] [--help]";

// Message types (docs: this header).
constexpr comm::MsgType kRoundTrip = comm::msg_range::kUser + 0;   // 8 B reply size -> that many B
constexpr comm::MsgType kStream = comm::msg_range::kUser + 1;      // one-way, counted by node 1
constexpr comm::MsgType kStreamSync = comm::msg_range::kUser + 2;  // 8 B total -> 8 B when arrived
constexpr comm::MsgType kEcho = comm::msg_range::kUser + 3;        // --seconds: echoes its payload
constexpr comm::RegionId kRegion = 1;

constexpr int kHotRoundTrips = 2000;
constexpr int kColdRoundTrips = 300;
constexpr int kWarmUp = 100;
constexpr int kStream4kCount = 10000;
constexpr int kStream1mCount = 128;
constexpr int kGets = 2000;
constexpr size_t k4K = 4096;
constexpr size_t k64K = 65536;
constexpr size_t k1M = 1 << 20;
constexpr int64_t kIdleNs = 2'000'000'000;

struct Args {
  bool help = false;
  bool json = false;
  int reps = 15;
  double seconds = 0;  // > 0: the --seconds mode
  double profile = 0;  // > 0: the --profile mode
};

// Parses the command line; returns the problem, if any.
std::optional<std::string> parse_args(int argc, char** argv, Args* args) {
  auto number = [](const char* flag, const char* text, double lo, double hi,
                   double* out) -> std::optional<std::string> {
    char* end = nullptr;
    double v = text != nullptr ? std::strtod(text, &end) : 0;
    if (text == nullptr || end == text || *end != '\0' || !(v >= lo && v <= hi))
      return fmt::format("{} wants a number from {} to {}, got '{}'", flag, lo, hi,
                         text != nullptr ? text : "");
    *out = v;
    return std::nullopt;
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const char* next = i + 1 < argc ? argv[i + 1] : nullptr;
    double v = 0;
    if (a == "--help" || a == "-h") {
      args->help = true;
    } else if (a == "--json") {
      args->json = true;
    } else if (a == "--reps") {
      if (auto e = number("--reps", next, 1, 100000, &v)) return e;
      if (v != static_cast<int>(v))
        return fmt::format("--reps wants a whole number, got '{}'", next);
      args->reps = static_cast<int>(v);
      ++i;
    } else if (a == "--seconds") {
      if (auto e = number("--seconds", next, 0.001, 1e6, &v)) return e;
      args->seconds = v;
      ++i;
    } else if (a == "--profile") {
      if (auto e = number("--profile", next, 0.001, 1e6, &v)) return e;
      args->profile = v;
      ++i;
    } else {
      return fmt::format("unknown argument '{}'", a);
    }
  }
  return std::nullopt;
}

// Stops the job through Loom's failure policy (prints the reason, tells the other nodes and the
// launcher, exits 3).
[[noreturn]] void fail(const Status& why) {
  runtime::current().comm().report_fatal(why);
  // Only reached when another thread is already stopping the job: give it time to finish.
  std::this_thread::sleep_for(std::chrono::seconds(30));
  std::_Exit(runtime::kExitJobFailed);
}

void check(const Status& s, const char* what) {
  if (!s) fail(Status(s.code(), fmt::format("comm_pingpong: {}: {}", what, s.to_string())));
}

// The transports a UCP endpoint uses, from ucp_ep_print_info: the distinct "tl/device" names of
// its lanes, e.g. "posix/memory cma/memory".
std::string lane_summary(const std::string& info) {
  std::set<std::string> tls;
  size_t pos = 0;
  while ((pos = info.find("lane[", pos)) != std::string::npos) {
    size_t eol = info.find('\n', pos);
    std::string line = info.substr(pos, eol == std::string::npos ? std::string::npos : eol - pos);
    pos = eol;
    // note: a lane line reads like "lane[0]:  1:posix/memory.0 md[1] ..."; take the word with a
    // '/' after the "N:" resource index.
    size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    size_t begin = line.rfind(':', slash);
    begin = begin == std::string::npos ? 0 : begin + 1;
    size_t end = line.find_first_of(" .", slash);
    tls.insert(line.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (eol == std::string::npos) break;
  }
  std::string out;
  for (const std::string& t : tls) out += (out.empty() ? "" : " ") + t;
  return out;
}

// --- Handlers (every node) -----------------------------------------------------------------

// The server side of the figures. Handlers run on the dispatcher only, so the stream state needs
// no lock.
class Server {
 public:
  explicit Server(comm::Comm& comm) : comm_(comm), reply_src_(k1M, std::byte{0xa5}) {}

  void register_types() {
    comm::MessageRegistry& r = comm_.registry();
    check(r.add(kRoundTrip, "bench.round_trip",
                [this](Incoming& in) -> Status {
                  Result<uint64_t> size = in.as<uint64_t>();
                  if (!size) return size.status();
                  if (*size > reply_src_.size())
                    return Status::malformed(fmt::format("reply of {} bytes asked", *size));
                  return comm_.reply(in.reply_to(), std::span(reply_src_.data(), *size));
                }),
          "register bench.round_trip");
    check(r.add(kStream, "bench.stream",
                [this](Incoming& in) -> Status {
                  stream_bytes_ += in.payload().size();
                  if (sync_.valid() && stream_bytes_ >= sync_target_) {
                    Status s = comm_.reply(sync_, comm::as_bytes_of(stream_bytes_));
                    sync_ = {};
                    return s;
                  }
                  return Status::ok();
                }),
          "register bench.stream");
    check(r.add(kStreamSync, "bench.stream_sync",
                [this](Incoming& in) -> Status {
                  Result<uint64_t> target = in.as<uint64_t>();
                  if (!target) return target.status();
                  if (stream_bytes_ >= *target)
                    return comm_.reply(in.reply_to(), comm::as_bytes_of(stream_bytes_));
                  // note: a rendezvous payload is handed up when its data has arrived, which can
                  // be after this later-sent request; answer when the count gets there.
                  sync_target_ = *target;
                  sync_ = in.reply_to();
                  return Status::ok();
                }),
          "register bench.stream_sync");
    check(
        r.add(kEcho, "bench.echo",
              [this](Incoming& in) -> Status { return comm_.reply(in.reply_to(), in.payload()); }),
        "register bench.echo");
  }

 private:
  comm::Comm& comm_;
  const std::vector<std::byte> reply_src_;
  uint64_t stream_bytes_ = 0;  // dispatcher only
  uint64_t sync_target_ = 0;   // dispatcher only
  comm::ReplyTo sync_;         // dispatcher only; valid while a stream_sync waits
};

// --- Measurement (node 0 = client) ---------------------------------------------------------

// Loom's client side.
class LoomClient {
 public:
  explicit LoomClient(comm::Comm& comm) : comm_(comm), tx_(k1M, std::byte{0x5a}) {
    get_dst_ = std::make_unique<std::byte[]>(k64K);
  }

  void round_trip(uint64_t reply_size) {
    Result<Buffer> r = comm_.call(1, kRoundTrip, comm::as_bytes_of(reply_size));
    check(r.status(), "round trip");
    if (r->size() != reply_size)
      fail(Status::internal(
          fmt::format("comm_pingpong: asked {} bytes, got {}", reply_size, r->size())));
  }

  // Returns the elapsed ns from the first send until node 1 has every byte. `owned`: sends
  // Buffers (zero copy); they are allocated and filled before the clock starts, as the raw
  // sender's buffer is.
  int64_t stream(size_t size, int count, bool owned) {
    std::vector<Buffer> bufs;
    if (owned) {
      for (int i = 0; i < count; ++i) {
        bufs.push_back(Buffer::copy_of(std::span(tx_.data(), size)));
      }
    }
    int64_t t0 = now_ns();
    for (int i = 0; i < count; ++i) {
      if (owned) {
        check(comm_.send(1, kStream, std::move(bufs[i])), "stream send");
      } else {
        check(comm_.send(1, kStream, std::span(tx_.data(), size)), "stream send");
      }
      streamed_ += size;
    }
    Result<Buffer> r = comm_.call(1, kStreamSync, comm::as_bytes_of(streamed_));
    check(r.status(), "stream sync");
    return now_ns() - t0;
  }

  void get_4k() {
    done_.reset();
    check(comm_.get(1, kRegion, 0, get_dst_.get(), k4K, &done_), "get");
    check(comm_.wait(done_), "get completion");
  }

 private:
  comm::Comm& comm_;
  const std::vector<std::byte> tx_;
  std::unique_ptr<std::byte[]> get_dst_;
  comm::Completion done_;
  uint64_t streamed_ = 0;
};

// Samples of every figure, by name.
using Samples = std::map<std::string, std::vector<double>>;

void measure_rep(LoomClient& loom, RawUcx& raw, int64_t raw_cold_spin_ns, Samples& s) {
  auto rt = [](int n, bool cold, auto&& op) {
    if (!cold)
      for (int i = 0; i < kWarmUp; ++i) op();  // wakes the server and keeps it polling
    return time_round_trips(n, cold, op);
  };
  auto raw_rt = [&raw](uint64_t size) {
    return [&raw, size] { check(raw.round_trip(size), "raw round trip"); };
  };
  auto loom_rt = [&loom](uint64_t size) { return [&loom, size] { loom.round_trip(size); }; };

  // Loom, with the raw server asleep.
  check(raw.set_server_spin(0), "raw control");
  s["loom_rt_8b_hot_us"].push_back(rt(kHotRoundTrips, false, loom_rt(8)));
  s["loom_rt_4k_hot_us"].push_back(rt(kHotRoundTrips, false, loom_rt(k4K)));
  s["loom_rt_64k_hot_us"].push_back(rt(kHotRoundTrips, false, loom_rt(k64K)));
  s["loom_get_4k_us"].push_back(rt(kGets, false, [&loom] { loom.get_4k(); }));
  s["loom_bw_4k_MBps"].push_back(
      mb_per_s(uint64_t{k4K} * kStream4kCount, loom.stream(k4K, kStream4kCount, false)));
  s["loom_bw_1m_MBps"].push_back(
      mb_per_s(uint64_t{k1M} * kStream1mCount, loom.stream(k1M, kStream1mCount, true)));
  s["loom_rt_8b_cold_us"].push_back(rt(kColdRoundTrips, true, loom_rt(8)));
  s["loom_rt_4k_cold_us"].push_back(rt(kColdRoundTrips, true, loom_rt(k4K)));

  // Raw UCX, hot: the server busy-polls.
  check(raw.set_server_spin(-1), "raw control");
  s["raw_rt_8b_hot_us"].push_back(rt(kHotRoundTrips, false, raw_rt(8)));
  s["raw_rt_4k_hot_us"].push_back(rt(kHotRoundTrips, false, raw_rt(k4K)));
  s["raw_rt_64k_hot_us"].push_back(rt(kHotRoundTrips, false, raw_rt(k64K)));
  auto raw_stream = [&raw](size_t size, int count, bool distinct_sources) {
    Result<int64_t> ns = raw.stream(size, count, distinct_sources);
    check(ns.status(), "raw stream");
    return mb_per_s(uint64_t{size} * count, *ns);
  };
  s["raw_bw_4k_MBps"].push_back(raw_stream(k4K, kStream4kCount, false));
  s["raw_bw_1m_MBps"].push_back(raw_stream(k1M, kStream1mCount, true));

  // Raw UCX, cold: the server spins like Loom's, then sleeps.
  check(raw.set_server_spin(raw_cold_spin_ns), "raw control");
  s["raw_rt_8b_cold_us"].push_back(rt(kColdRoundTrips, true, raw_rt(8)));
  s["raw_rt_4k_cold_us"].push_back(rt(kColdRoundTrips, true, raw_rt(k4K)));
}

// Idle phase (every node): returns {cpu percent of one core, server sleeps, server wakeups}.
nlohmann::json measure_idle() {
  runtime::Runtime& rt = runtime::current();
  comm::ServerThread::Stats st0 = rt.server().stats();
  int64_t cpu0 = process_cpu_ns();
  int64_t t0 = now_ns();
  std::this_thread::sleep_for(std::chrono::nanoseconds(kIdleNs));
  int64_t cpu1 = process_cpu_ns();
  int64_t t1 = now_ns();
  comm::ServerThread::Stats st1 = rt.server().stats();
  return {{"cpu_pct", 100.0 * static_cast<double>(cpu1 - cpu0) / static_cast<double>(t1 - t0)},
          {"seconds", static_cast<double>(t1 - t0) / 1e9},
          {"sleeps", st1.sleeps - st0.sleeps},
          {"wakeups", st1.wakeups - st0.wakeups}};
}

// The rows of the table: a label, the Loom figure's JSON key and its raw counterpart's (or
// nullptr), and the key of the ratio Loom/raw.
struct Row {
  const char* label;
  const char* loom;
  const char* raw;
  const char* ratio;
};

constexpr Row kRows[] = {
    {"round trip 8 B, hot (us)", "loom_rt_8b_hot_us", "raw_rt_8b_hot_us", "ratio_rt_8b_hot"},
    {"round trip 4 KiB, hot (us)", "loom_rt_4k_hot_us", "raw_rt_4k_hot_us", "ratio_rt_4k_hot"},
    {"round trip 64 KiB, hot (us)", "loom_rt_64k_hot_us", "raw_rt_64k_hot_us", "ratio_rt_64k_hot"},
    {"round trip 8 B, cold (us)", "loom_rt_8b_cold_us", "raw_rt_8b_cold_us", "ratio_rt_8b_cold"},
    {"round trip 4 KiB, cold (us)", "loom_rt_4k_cold_us", "raw_rt_4k_cold_us", "ratio_rt_4k_cold"},
    {"stream 4 KiB (MB/s)", "loom_bw_4k_MBps", "raw_bw_4k_MBps", "ratio_bw_4k"},
    {"stream 1 MiB (MB/s)", "loom_bw_1m_MBps", "raw_bw_1m_MBps", "ratio_bw_1m"},
    {"get 4 KiB (us)", "loom_get_4k_us", nullptr, nullptr},
};

int run_measurement(const Args& args) {
  runtime::Runtime& rt = runtime::current();
  comm::Comm& comm = rt.comm();
  const NodeId me = rt.rank();
  if (rt.size() != 2) {
    if (me == 0)
      std::fprintf(stderr,
                   "comm_pingpong: the measurement needs exactly 2 nodes (got %u); "
                   "only --seconds runs on any number\n",
                   rt.size());
    return runtime::kExitConfig;
  }

  // One-sided region (collective).
  std::vector<std::byte> region(k64K, std::byte{0x3c});
  check(comm.register_region(kRegion, region.data(), region.size()), "register_region");

  // The raw UCX side: its own context and worker, addresses exchanged through Loom's bootstrap.
  RawUcx::Options ro;
  ro.tls = rt.config().get_string("TRANSPORTS");
  ro.net_devices = rt.config().get_string("NET_DEVICES");
  ro.err_handling = rt.config().get_bool("UCX_ERR_HANDLING");
  ro.wait_spin_ns = rt.config().get_int("WAIT_SPIN_US") * 1000;
  Result<std::unique_ptr<RawUcx>> raw = RawUcx::create(ro);
  check(raw.status(), "raw UCX");
  Result<std::vector<std::string>> addrs = rt.bootstrap().allgather((*raw)->address());
  check(addrs.status(), "raw UCX address exchange");
  check((*raw)->connect((*addrs)[1 - me]), "raw UCX connect");
  const int64_t spin_ns = rt.config().get_int("SPIN_US") * 1000;

  Samples samples;
  std::string loom_lanes, raw_lanes;
  if (me == 1) {
    (*raw)->serve();  // until node 0 says quit
  } else {
    LoomClient loom(comm);
    // Warm-up: connects the lanes (eager and rendezvous) of both stacks.
    check((*raw)->set_server_spin(-1), "raw control");
    for (uint64_t size : {uint64_t{8}, uint64_t{k4K}, uint64_t{k64K}}) {
      for (int i = 0; i < kWarmUp; ++i) loom.round_trip(size);
      for (int i = 0; i < kWarmUp; ++i) check((*raw)->round_trip(size), "raw round trip");
    }
    loom.stream(k1M, 8, true);
    check((*raw)->stream(k1M, 8, true).status(), "raw stream");
    for (int i = 0; i < kWarmUp; ++i) loom.get_4k();

    for (int rep = 0; rep < args.reps; ++rep) measure_rep(loom, **raw, spin_ns, samples);
    loom_lanes = lane_summary(rt.transport().describe_endpoint(1));
    raw_lanes = lane_summary((*raw)->describe());
    check((*raw)->quit_server(), "raw control");
  }
  check(rt.bootstrap().barrier(), "barrier");  // neither side sends on the raw endpoint now
  raw->reset();

  // Idle phase: both nodes sleep; each measures itself.
  check(rt.bootstrap().barrier(), "barrier");
  nlohmann::json idle = measure_idle();
  Result<std::vector<std::string>> idles = rt.bootstrap().allgather(idle.dump());
  check(idles.status(), "idle exchange");
  if (me != 0) return 0;

  nlohmann::json idle0 = nlohmann::json::parse((*idles)[0]);
  nlohmann::json idle1 = nlohmann::json::parse((*idles)[1]);
  nlohmann::json j;
  for (auto& [name, v] : samples) j[name] = median(v);
  for (const Row& row : kRows) {
    if (row.raw != nullptr) j[row.ratio] = j[row.loom].get<double>() / j[row.raw].get<double>();
  }
  j["idle_cpu_pct"] = idle1["cpu_pct"];
  j["idle_cpu_pct_node0"] = idle0["cpu_pct"];
  j["idle_server_wakeups_node1"] = idle1["wakeups"];
  j["idle_seconds"] = idle1["seconds"];
  j["reps"] = args.reps;
  j["batch"] = {{"hot_round_trips", kHotRoundTrips}, {"cold_round_trips", kColdRoundTrips},
                {"cold_gap_us", kColdGapUs},         {"stream_4k_msgs", kStream4kCount},
                {"stream_1m_msgs", kStream1mCount},  {"gets", kGets}};
  const char* ucx_tls = std::getenv("UCX_TLS");
  j["transport"] = {{"loom_transports", ro.tls},
                    {"ucx_tls", ucx_tls != nullptr ? ucx_tls : ""},
                    {"loom_lanes", loom_lanes},
                    {"raw_lanes", raw_lanes},
                    {"ucx_version", ucp_get_version_string()}};
  j["config"] = {{"spin_us", rt.config().get_int("SPIN_US")},
                 {"wait_spin_us", rt.config().get_int("WAIT_SPIN_US")}};
  const double hot = j["ratio_rt_4k_hot"], cold = j["ratio_rt_4k_cold"];
  const double idle_pct = j["idle_cpu_pct"];
  j["goal_met"] = {
      {"rt_4k_hot", hot <= 1.3}, {"rt_4k_cold", cold <= 1.3}, {"idle", idle_pct < 1.0}};

  if (args.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("comm_pingpong: 2 nodes, UCX %s, LOOM_TRANSPORTS='%s', medians of %d reps\n",
              ucp_get_version_string(), ro.tls.c_str(), args.reps);
  std::printf("  lanes: Loom [%s], raw UCX [%s]\n\n", loom_lanes.c_str(), raw_lanes.c_str());
  std::printf("%-30s %12s %12s %10s\n", "metric", "Loom", "raw UCX", "Loom/raw");
  for (const Row& row : kRows) {
    double l = j[row.loom];
    if (row.raw == nullptr) {
      std::printf("%-30s %12.2f %12s %10s\n", row.label, l, "-", "-");
      continue;
    }
    double r = j[row.raw];
    std::printf("%-30s %12.2f %12.2f %9.2fx\n", row.label, l, r, l / r);
  }
  std::printf("%-30s %12.3f %12s %10s\n", "idle CPU, node 1 (% of core)", idle_pct, "-", "-");
  std::printf("%-30s %12.3f %12s %10s\n", "idle CPU, node 0 (% of core)",
              idle0["cpu_pct"].get<double>(), "-", "-");
  std::printf(
      "\ngoals: 4 KiB round trip <= 1.3x raw: hot %.2fx %s, cold %.2fx %s; idle < 1%%: %s\n", hot,
      hot <= 1.3 ? "met" : "MISSED", cold, cold <= 1.3 ? "met" : "MISSED",
      idle_pct < 1.0 ? "met" : "MISSED");
  std::printf(
      "(cold figures depend on where the scheduler wakes threads; on a small VM compare runs "
      "with one core per node: bench/RESULTS.md)\n");
  return 0;
}

// --- --seconds: keep every node busy ------------------------------------------------------------

struct EchoHeader {
  uint32_t node;
  uint32_t thread;
  uint64_t seq;
};

int run_stress(double seconds) {
  runtime::Runtime& rt = runtime::current();
  comm::Comm& comm = rt.comm();
  const NodeId me = rt.rank();
  const uint32_t n = rt.size();
  check(rt.bootstrap().barrier(), "barrier");  // every node has its handlers before anyone sends

  std::vector<NodeId> targets;
  for (NodeId p = 0; p < n; ++p)
    if (p != me) targets.push_back(p);
  if (targets.empty()) targets.push_back(me);  // alone: talk to ourselves

  const int64_t deadline = now_ns() + static_cast<int64_t>(seconds * 1e9);
  constexpr int kThreads = 2;
  std::atomic<uint64_t> calls{0};
  auto worker = [&](uint32_t t) {
    std::vector<std::byte> req;
    for (uint64_t seq = 0; now_ns() < deadline; ++seq) {
      NodeId dst = targets[(seq + t) % targets.size()];
      // Mostly small requests; every 16th is 64 KiB so the rendezvous path runs too.
      size_t size = seq % 16 == 15 ? k64K : 64;
      req.resize(size);
      EchoHeader h{me, t, seq};
      std::memcpy(req.data(), &h, sizeof h);
      for (size_t i = sizeof h; i < size; ++i)
        req[i] = static_cast<std::byte>((seq * 31 + i) & 0xff);
      Result<Buffer> r = comm.call(dst, kEcho, req);
      check(r.status(), "echo request");
      if (r->size() != size || std::memcmp(r->data(), req.data(), size) != 0)
        fail(
            Status::internal(fmt::format("comm_pingpong: node {} sent a wrong echo for request "
                                         "{} of thread {} ({} bytes, got {})",
                                         dst, seq, t, size, r->size())));
      calls.fetch_add(1, std::memory_order_relaxed);
    }
  };
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (std::thread& th : threads) th.join();
  std::printf("comm_pingpong: node %u: %llu checked round trips to %zu node(s) in %.1f s\n", me,
              static_cast<unsigned long long>(calls.load()), targets.size(), seconds);
  std::fflush(stdout);
  return 0;
}

}  // namespace
// --profile: Loom's 8 B hot round trip in a loop on node 0; the other nodes only serve.
int run_profile(double seconds) {
  runtime::Runtime& rt = runtime::current();
  check(rt.bootstrap().barrier(), "barrier");  // every node's handlers are registered
  if (rt.rank() == 0 && rt.comm().size() > 1) {
    LoomClient loom(rt.comm());
    for (int i = 0; i < kWarmUp; ++i) loom.round_trip(8);
    const int64_t t0 = now_ns(), until = t0 + static_cast<int64_t>(seconds * 1e9);
    int64_t n = 0, t = t0;
    for (; t < until; t = now_ns(), n += 1000)
      for (int i = 0; i < 1000; ++i) loom.round_trip(8);
    std::printf("comm_pingpong --profile: %lld round trips of 8 B, %.3f us each\n",
                static_cast<long long>(n),
                static_cast<double>(t - t0) / 1e3 / static_cast<double>(n));
  }
  check(rt.bootstrap().barrier(), "barrier");
  return 0;
}

}  // namespace loom::bench

int main(int argc, char** argv) {
  loom::bench::Args args;
  if (auto rc = loom::bench::parse_or_exit(argc, argv, "comm_pingpong", loom::bench::kUsage,
                                           loom::bench::parse_args, &args))
    return *rc;
  loom::init(&argc, &argv);
  loom::bench::Server server(loom::runtime::current().comm());
  server.register_types();
  int rc = args.seconds > 0   ? loom::bench::run_stress(args.seconds)
           : args.profile > 0 ? loom::bench::run_profile(args.profile)
                              : loom::bench::run_measurement(args);
  loom::finalize();
  return rc;
}

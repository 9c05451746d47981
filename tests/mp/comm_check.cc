// comm_check: the program the multi-process tests run under loomrun (or mpirun).
//
//   comm_check pingpong N          node 0 <-> node 1 request/reply, payloads checked
//   comm_check storm TOTAL         all-to-all storm of TOTAL messages, random sizes 8 B..256 KiB,
//                                  each checksummed; every node checks nothing was lost,
//                                  duplicated or corrupted
//   comm_check concurrent T N      T application threads per node, N calls each to random peers
//   comm_check rma                 one-sided put/get of 4 KiB and 1 MiB, verified byte for byte
//   comm_check spin SECONDS        all nodes exchange requests until SECONDS pass (failure tests)
//   comm_check malformed KIND      node 1 sends node 0 a bad message (KIND: type | length)
//   comm_check foreign_tag         node 1 sends node 0 a message with another job's tag; node 0
//                                  must refuse it (not run the handler) and the job must go on
//   comm_check listeners           every node lists the TCP sockets it listens on (its fds
//                                  against /proc/net/tcp and tcp6): a loomrun job must listen on
//                                  loopback only (docs/comm.md, "Trust")
//   comm_check lanes N D           the waiter lane (docs/comm.md): node 0 computes ~1 ms before
//                                  each of N calls to node 1, so its server thread sleeps; the
//                                  replies must not wake it (fewer than N/4 wake-ups; run it
//                                  with a LOOM_WAIT_SPIN_US above node 1's wake-up time, so that
//                                  node 0's waiter polls, not sleeps). Then node 1 answers 20
//                                  calls only after D ms (more than that spin), so node 0's
//                                  waiting thread sleeps; each must still return within 30 ms of
//                                  the reply, not when the server thread's 100 ms tick finds it.
//
// Every node prints "rank R pid P" first (tests use it to signal a node), and "ok: ..." lines.
// Failures print "FAILED: ..." and exit 1.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm.h"
#include "comm/server_thread.h"
#include "loom/loom.hpp"
#include "runtime/runtime.h"

namespace {

using loom::Status;
using loom::comm::Buffer;
using loom::comm::Comm;
using loom::comm::Incoming;
using loom::comm::MsgType;
using loom::comm::NodeId;

constexpr MsgType kEcho = loom::comm::msg_range::kUser + 10;
constexpr MsgType kStorm = loom::comm::msg_range::kUser + 11;
constexpr MsgType kLate = loom::comm::msg_range::kUser + 12;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stdout, "FAILED: %s\n", what.c_str());
  std::fflush(stdout);
  std::_Exit(1);
}

uint64_t fnv1a(const std::byte* p, size_t n, uint64_t h = 1469598103934665603ull) {
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<uint8_t>(p[i]);
    h *= 1099511628211ull;
  }
  return h;
}

// A payload: 8-byte checksum of the rest, then bytes derived from (seed).
Buffer make_payload(size_t size, uint64_t seed) {
  Buffer b(size < 8 ? 8 : size);
  std::mt19937_64 rng(seed);
  for (size_t i = 8; i < b.size(); i += 8) {
    uint64_t v = rng();
    std::memcpy(b.data() + i, &v, std::min<size_t>(8, b.size() - i));
  }
  uint64_t sum = fnv1a(b.data() + 8, b.size() - 8);
  std::memcpy(b.data(), &sum, 8);
  return b;
}

bool payload_ok(std::span<const std::byte> p) {
  if (p.size() < 8) return false;
  uint64_t sum;
  std::memcpy(&sum, p.data(), 8);
  return sum == fnv1a(p.data() + 8, p.size() - 8);
}

Comm& comm() { return loom::runtime::current().comm(); }
void barrier() {
  Status s = loom::runtime::current().bootstrap().barrier();
  if (!s) fail("barrier: " + s.to_string());
}

void register_echo() {
  Status s = comm().registry().add(kEcho, "echo", [](Incoming& in) -> Status {
    if (!payload_ok(in.payload())) return Status::malformed("echo payload checksum mismatch");
    return comm().reply(in.reply_to(), in.take_payload());
  });
  if (!s) fail(s.to_string());
}

void call_checked(NodeId dst, size_t size, uint64_t seed) {
  Buffer req = make_payload(size, seed);
  loom::Result<Buffer> r = comm().call(dst, kEcho, req.span());
  if (!r) fail(fmt::format("call to node {}: {}", dst, r.status().to_string()));
  if (r->size() != req.size() || std::memcmp(r->data(), req.data(), req.size()) != 0)
    fail(fmt::format("reply from node {} differs from the request ({} bytes)", dst, size));
}

int pingpong(int n) {
  register_echo();
  barrier();
  if (comm().rank() == 0 && comm().size() > 1) {
    for (int i = 0; i < n; ++i) call_checked(1, 8 + (i * 37) % 5000, i);
    std::printf("ok: pingpong %d round trips\n", n);
  }
  return 0;
}

// --- storm ---------------------------------------------------------------------------------

struct StormHeader {
  uint32_t src;
  uint32_t seq;
};

int storm(long total) {
  const uint32_t n = comm().size();
  if (n < 2) fail("storm needs at least 2 nodes");
  const long per_pair = total / (n * (n - 1));
  std::vector<std::vector<std::atomic<uint8_t>>> seen(n);
  for (auto& v : seen) v = std::vector<std::atomic<uint8_t>>(per_pair);
  std::atomic<long> received{0}, bad{0}, dups{0};
  Status s = comm().registry().add(kStorm, "storm", [&](Incoming& in) -> Status {
    auto p = in.payload();
    if (p.size() < 8 + sizeof(StormHeader) || !payload_ok(p)) {
      bad++;
      return Status::ok();
    }
    StormHeader h;
    std::memcpy(&h, p.data() + 8, sizeof h);
    if (h.src != in.src() || h.seq >= per_pair) {
      bad++;
      return Status::ok();
    }
    if (seen[h.src][h.seq].exchange(1)) dups++;
    received++;
    return Status::ok();
  });
  if (!s) fail(s.to_string());
  barrier();
  const NodeId me = comm().rank();
  std::mt19937_64 rng(1234 + me);
  // Log-uniform sizes between 8 B and 256 KiB: mostly small messages, some large.
  std::uniform_real_distribution<double> logsize(std::log(8.0), std::log(256.0 * 1024));
  uint64_t bytes = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (long seq = 0; seq < per_pair; ++seq) {
    for (NodeId k = 1; k < n; ++k) {
      NodeId dst = (me + k) % n;
      size_t size = std::max<size_t>(8 + sizeof(StormHeader), std::exp(logsize(rng)));
      Buffer b(size);
      StormHeader h{me, static_cast<uint32_t>(seq)};
      std::memcpy(b.data() + 8, &h, sizeof h);
      std::mt19937_64 fill(rng());
      for (size_t i = 8 + sizeof h; i < size; ++i) b.data()[i] = std::byte(fill() & 0xff);
      uint64_t sum = fnv1a(b.data() + 8, size - 8);
      std::memcpy(b.data(), &sum, 8);
      bytes += size;
      Status st = comm().send(dst, kStorm, std::move(b));
      if (!st) fail("storm send: " + st.to_string());
    }
  }
  const long expected = per_pair * (n - 1);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (received.load() + bad.load() < expected) {
    if (std::chrono::steady_clock::now() > deadline)
      fail(fmt::format("storm: received {} of {} messages", received.load(), expected));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (bad.load() != 0) fail(fmt::format("storm: {} corrupted messages", bad.load()));
  if (dups.load() != 0) fail(fmt::format("storm: {} duplicated messages", dups.load()));
  for (NodeId src = 0; src < n; ++src) {
    if (src == me) continue;
    for (long q = 0; q < per_pair; ++q)
      if (!seen[src][q].load()) fail(fmt::format("storm: message {} from node {} lost", q, src));
  }
  barrier();
  std::printf("ok: storm node %u received %ld messages, sent %ld (%.1f MB) in %.2f s\n", me,
              received.load(), expected, bytes / 1e6, secs);
  return 0;
}

// --- concurrent request/reply ---------------------------------------------------------------

int concurrent(int threads, int calls) {
  register_echo();
  barrier();
  const uint32_t n = comm().size();
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([=] {
      std::mt19937 rng(comm().rank() * 100 + t);
      for (int i = 0; i < calls; ++i) {
        NodeId dst = rng() % n;
        size_t size = 8 + rng() % 20000;
        call_checked(dst, size, rng());
      }
    });
  }
  for (auto& t : ts) t.join();
  barrier();
  std::printf("ok: concurrent node %u: %d threads x %d calls\n", comm().rank(), threads, calls);
  return 0;
}

// --- one-sided ------------------------------------------------------------------------------

int rma() {
  const uint32_t n = comm().size();
  const NodeId me = comm().rank();
  constexpr size_t kRegion = 4 << 20;
  std::vector<std::byte> region(kRegion, std::byte{0});
  Status s = comm().register_region(7, region.data(), region.size());
  if (!s) fail("register_region: " + s.to_string());
  const NodeId right = (me + 1) % n;
  const NodeId left = (me + n - 1) % n;
  struct Case {
    size_t offset, len;
  };
  const Case cases[] = {{0, 4096}, {8192, 1 << 20}, {(2 << 20) + 123, 4096}};
  // Put a pattern derived from (me, case) into the right neighbour's region.
  std::vector<Buffer> srcs;
  for (size_t c = 0; c < std::size(cases); ++c) {
    srcs.push_back(make_payload(cases[c].len, me * 10 + c));
    loom::comm::Completion done;
    s = comm().put(right, 7, cases[c].offset, srcs.back().data(), cases[c].len, &done);
    if (!s) fail("put: " + s.to_string());
    if (!comm().wait(done)) fail("put completion: " + done.status().to_string());
  }
  barrier();
  // Our region now holds the left neighbour's patterns.
  for (size_t c = 0; c < std::size(cases); ++c) {
    Buffer expect = make_payload(cases[c].len, left * 10 + c);
    if (std::memcmp(region.data() + cases[c].offset, expect.data(), cases[c].len) != 0)
      fail(fmt::format("put of {} bytes from node {} arrived corrupted", cases[c].len, left));
  }
  // Read back what we wrote into the right neighbour, byte for byte.
  for (size_t c = 0; c < std::size(cases); ++c) {
    std::vector<std::byte> back(cases[c].len);
    loom::comm::Completion done;
    s = comm().get(right, 7, cases[c].offset, back.data(), back.size(), &done);
    if (!s) fail("get: " + s.to_string());
    if (!comm().wait(done)) fail("get completion: " + done.status().to_string());
    if (std::memcmp(back.data(), srcs[c].data(), back.size()) != 0)
      fail(fmt::format("get of {} bytes from node {} differs", cases[c].len, right));
  }
  // Out of range is refused, not performed.
  std::byte one{};
  loom::comm::Completion unused;
  s = comm().get(right, 7, kRegion, &one, 1, &unused);
  if (s.code() != loom::StatusCode::kInvalidArgument)
    fail("out-of-range get was not refused: " + s.to_string());
  barrier();
  std::printf("ok: rma node %u\n", me);
  return 0;
}

// --- spin -----------------------------------------------------------------------------------

int spin(double seconds) {
  register_echo();
  barrier();
  const uint32_t n = comm().size();
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  long calls = 0;
  while (std::chrono::steady_clock::now() < end) {
    if (n > 1) {
      call_checked((comm().rank() + 1 + calls % (n - 1)) % n, 64, calls);
      ++calls;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  barrier();
  std::printf("ok: spin node %u made %ld calls\n", comm().rank(), calls);
  return 0;
}

// --- malformed ------------------------------------------------------------------------------

int malformed(const std::string& kind) {
  register_echo();
  barrier();
  if (comm().rank() == 1) {
    if (kind == "type") {
      (void)comm().send(0, 499, std::span<const std::byte>());
    } else if (kind == "length") {
      // A header whose length disagrees with the payload, straight through the transport.
      loom::comm::WireHeader h;
      h.type = kEcho;
      h.src = 1;
      h.length = 999;
      h.job = loom::comm::job_tag_of(loom::runtime::current().bootstrap().job_token());
      std::array<std::byte, loom::comm::kWireHeaderSize> hb;
      loom::comm::encode_header(h, hb);
      std::array<std::byte, 10> body{};
      (void)loom::runtime::current().transport().send(0, hb, body);
    } else {
      fail("unknown malformed kind " + kind);
    }
  }
  // Everyone waits; node 0 must stop the job, and every node must exit non-zero.
  std::this_thread::sleep_for(std::chrono::seconds(20));
  fail("the malformed message did not stop the job");
}

// --- foreign_tag ------------------------------------------------------------------------------

int foreign_tag() {
  std::atomic<int> handled{0};
  Status s = comm().registry().add(kEcho, "echo-count", [&](Incoming& in) -> Status {
    handled.fetch_add(1);
    return comm().reply(in.reply_to(), std::span<const std::byte>());
  });
  if (!s) fail("registering the handler: " + s.to_string());
  barrier();
  const uint16_t tag = loom::comm::job_tag_of(loom::runtime::current().bootstrap().job_token());
  if (comm().rank() == 1) {
    // A well-formed header of this job's type and sender, but another job's tag, straight
    // through the transport: node 0 must drop it (a warning), not run the handler, not fail.
    loom::comm::WireHeader h;
    h.type = kEcho;
    h.src = 1;
    h.length = 0;
    h.job = static_cast<uint16_t>(tag ^ 0x5a5a);
    std::array<std::byte, loom::comm::kWireHeaderSize> hb;
    loom::comm::encode_header(h, hb);
    Status st = loom::runtime::current().transport().send(0, hb, std::span<const std::byte>());
    if (!st) fail("sending the foreign message: " + st.to_string());
    // Then a message of this job: the same channel, so it arrives after the foreign one.
    auto r = comm().call(0, kEcho, std::span<const std::byte>());
    if (!r) fail("the call after the foreign message failed: " + r.status().to_string());
  }
  barrier();
  if (comm().rank() == 0) {
    if (handled.load() != 1)
      fail(
          fmt::format("node 0 ran the handler {} times (expected 1: the foreign message must "
                      "be refused, the job's own call answered)",
                      handled.load()));
    if (comm().failed()) fail("the foreign message failed the job");
    std::printf("ok: a message with another job's tag was refused, the job went on\n");
  }
  barrier();
  return 0;
}

// --- listeners ----------------------------------------------------------------------------------

// The inodes of this process's sockets.
std::vector<std::string> own_socket_inodes() {
  std::vector<std::string> inodes;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    auto target = std::filesystem::read_symlink(e.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0)
      inodes.push_back(target.substr(8, target.size() - 9));
  }
  return inodes;
}

// Whether a /proc/net/tcp{,6} local address (hex, as the kernel prints it) is a loopback one.
bool loopback_address(const std::string& hex) {
  if (hex.size() == 8) return hex.substr(6, 2) == "7F";  // 127.x.y.z, little-endian
  if (hex.size() == 32)
    return hex == "00000000000000000000000001000000" ||  // ::1
           (hex.substr(0, 24) == "0000000000000000FFFF0000" &&
            hex.substr(30, 2) == "7F");  // ::ffff:127.x
  return false;
}

int listeners() {
  barrier();  // every node's endpoints exist
  auto inodes = own_socket_inodes();
  int listening = 0;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, st, queues, tr, retr, uid, timeout, inode;
      f >> sl >> local >> remote >> st >> queues >> tr >> retr >> uid >> timeout >> inode;
      if (st != "0A" || std::find(inodes.begin(), inodes.end(), inode) == inodes.end()) continue;
      ++listening;
      const std::string addr = local.substr(0, local.find(':'));
      if (!loopback_address(addr))
        fail(fmt::format("node {} listens on a non-loopback address ({} {})", comm().rank(), table,
                         local));
    }
  }
  std::printf("ok: node %u listens on %d TCP sockets, all on loopback\n", comm().rank(), listening);
  barrier();
  return 0;
}

// --- lanes ---------------------------------------------------------------------------------

int lanes(int n, int delay_ms) {
  register_echo();
  // kLate: answered 5 ms later by a helper thread (a deferred reply), so the caller sleeps.
  std::mutex mu;
  struct Late {
    loom::comm::ReplyTo to;
    std::chrono::steady_clock::time_point at;
  };
  std::vector<Late> late;
  std::atomic<bool> done{false};
  Status s = comm().registry().add(kLate, "late", [&](Incoming& in) -> Status {
    std::lock_guard<std::mutex> l(mu);
    late.push_back({in.reply_to(), std::chrono::steady_clock::now()});
    return Status::ok();
  });
  if (!s) fail(s.to_string());
  std::thread helper([&] {
    while (!done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      auto due = std::chrono::steady_clock::now() - std::chrono::milliseconds(delay_ms);
      std::vector<Late> now;
      {
        std::lock_guard<std::mutex> l(mu);
        auto it =
            std::partition(late.begin(), late.end(), [&](const Late& x) { return x.at > due; });
        now.assign(it, late.end());
        late.erase(it, late.end());
      }
      for (const auto& x : now) (void)comm().reply(x.to, Buffer(8).span());
    }
  });
  barrier();
  if (comm().rank() == 0 && comm().size() > 1) {
    loom::comm::ServerThread& server = loom::runtime::current().server();
    uint64_t w0 = server.stats().wakeups;
    volatile uint64_t sink = 0;
    for (int i = 0; i < n; ++i) {
      auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1);
      while (std::chrono::steady_clock::now() < until) sink = sink + 1;  // computing
      call_checked(1, 64, i);
    }
    uint64_t woke = server.stats().wakeups - w0;
    if (woke * 4 >= static_cast<uint64_t>(n))
      fail(fmt::format("{} replies to a polling thread woke its server thread {} times", n, woke));
    std::printf("ok: lanes: %d replies, node 0's server thread woke %llu times\n", n,
                static_cast<unsigned long long>(woke));
    double slowest = 0;
    for (int i = 0; i < 20; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      loom::Result<Buffer> r = comm().call(1, kLate, Buffer(8).span());
      if (!r) fail("late call: " + r.status().to_string());
      double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (getenv("LANES_DEBUG")) std::printf("late %d: %.2f ms\n", i, ms);
      slowest = std::max(slowest, ms);
    }
    if (slowest > delay_ms + 30)
      fail(fmt::format("a sleeping waiter got its reply after {:.1f} ms (sent after {} ms)",
                       slowest, delay_ms));
    std::printf("ok: lanes: 20 replies sent after %d ms, slowest arrived after %.1f ms\n", delay_ms,
                slowest);
  }
  barrier();
  done = true;
  helper.join();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: comm_check "
                 "pingpong|storm|concurrent|rma|spin|malformed|foreign_tag|listeners|lanes ...\n");
    return 2;
  }
  std::string mode = argv[1];
  auto arg = [&](int i, long def) { return argc > i ? std::atol(argv[i]) : def; };
  loom::init(&argc, &argv);
  std::printf("rank %d pid %d\n", loom::node_id(), getpid());
  std::fflush(stdout);
  int rc = 2;
  if (mode == "pingpong")
    rc = pingpong(static_cast<int>(arg(2, 10000)));
  else if (mode == "storm")
    rc = storm(arg(2, 100000));
  else if (mode == "concurrent")
    rc = concurrent(static_cast<int>(arg(2, 4)), static_cast<int>(arg(3, 2000)));
  else if (mode == "rma")
    rc = rma();
  else if (mode == "spin")
    rc = spin(argc > 2 ? std::atof(argv[2]) : 5.0);
  else if (mode == "malformed")
    rc = malformed(argc > 2 ? argv[2] : "type");
  else if (mode == "foreign_tag")
    rc = foreign_tag();
  else if (mode == "listeners")
    rc = listeners();
  else if (mode == "lanes")
    rc = lanes(static_cast<int>(arg(2, 400)), static_cast<int>(arg(3, 10)));
  else
    std::fprintf(stderr, "comm_check: unknown mode '%s'\n", mode.c_str());
  std::fflush(stdout);
  loom::finalize();
  return rc;
}

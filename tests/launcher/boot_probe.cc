// boot_probe: a node program for the launcher tests. It bootstraps with make_bootstrap() (loomrun,
// PMIx or single, as the environment says), runs a server thread that watches event_fd() like the
// runtime does, allgathers its rank and checks every entry, then misbehaves as told.
//
//   boot_probe [--rank R] [--exit CODE] [--kill SIG] [--abort REASON] [--sleep SECONDS]
//              [--ignore-term] [--rounds K] [--extra-barriers K] [--no-bye] [--bad-token]
//              [--stats] [--skip-stats-rank R] [--wait-file PATH] [--others-delay SECONDS]
//              [--out-dir DIR] [--flood K]
//
// --rank R limits --exit/--kill/--abort/--sleep/--rounds/--extra-barriers/--no-bye/--bad-token to
// node R (default: every node); --others-delay makes the other nodes wait before their first
// collective. --out-dir writes stdout to DIR/out.<rank> instead. --flood K: before joining, the
// node opens K connections to loomrun's socket that never say anything, and one that announces a
// 64 MiB frame and sends junk, and keeps them open. Output (line-buffered stdout):
//   "rank R size N pid P", "token T", "rank R allgather ok"; failures as "rank R: <what>: <status>"
// and exit status 1.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/config.h"
#include "comm/bootstrap/bootstrap.h"

namespace {

struct Args {
  long only_rank = -1;
  int exit_code = 0;
  int kill_sig = 0;
  std::string abort_reason;
  double sleep_s = 0;
  bool ignore_term = false;
  int rounds = 1;
  int extra_barriers = 0;
  double others_delay_s = 0;
  std::string out_dir;
  bool no_bye = false;
  bool bad_token = false;
  bool stats = false;
  long skip_stats_rank = -1;
  std::string wait_file;
  int flood = 0;
};

[[noreturn]] void usage(const char* what) {
  std::fprintf(stderr, "boot_probe: bad argument %s\n", what);
  std::exit(64);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) usage(argv[i]);
      return argv[++i];
    };
    if (k == "--rank")
      a.only_rank = std::stol(val());
    else if (k == "--exit")
      a.exit_code = std::stoi(val());
    else if (k == "--kill")
      a.kill_sig = std::stoi(val());
    else if (k == "--abort")
      a.abort_reason = val();
    else if (k == "--sleep")
      a.sleep_s = std::stod(val());
    else if (k == "--ignore-term")
      a.ignore_term = true;
    else if (k == "--rounds")
      a.rounds = std::stoi(val());
    else if (k == "--extra-barriers")
      a.extra_barriers = std::stoi(val());
    else if (k == "--others-delay")
      a.others_delay_s = std::stod(val());
    else if (k == "--out-dir")
      a.out_dir = val();
    else if (k == "--no-bye")
      a.no_bye = true;
    else if (k == "--bad-token")
      a.bad_token = true;
    else if (k == "--stats")
      a.stats = true;
    else if (k == "--skip-stats-rank")
      a.skip_stats_rank = std::stol(val());
    else if (k == "--wait-file")
      a.wait_file = val();
    else if (k == "--flood")
      a.flood = std::stoi(val());
    else
      usage(argv[i]);
  }
  return a;
}

// Prints "rank R: what: status" and exits 1. Both the server thread and the main thread may fail
// at once (a failure is reported to both); only the first prints.
[[noreturn]] void fail(long rank, const char* what, const std::string& detail) {
  static std::mutex mu;
  mu.lock();  // never unlocked: the process ends here
  std::printf("rank %ld: %s: %s\n", rank, what, detail.c_str());
  std::fflush(stdout);
  std::_Exit(1);
}

void sleep_for(double s) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(s);
  while (std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

}  // namespace

// LeakSanitizer (asan preset): libpmix 4.2 leaks a few bytes in PMIx_Init that are not ours.
extern "C" const char* __lsan_default_suppressions() { return "leak:libpmix.so\n"; }

int main(int argc, char** argv) {
  Args args = parse(argc, argv);
  if (!args.out_dir.empty()) {
    // For tests that kill the launcher, whose output forwarding dies with it.
    const char* r = std::getenv("PMIX_RANK");
    if (r == nullptr) r = std::getenv("LOOM_RANK");
    std::string path = args.out_dir + "/out." + (r != nullptr ? r : "x");
    if (std::freopen(path.c_str(), "w", stdout) == nullptr) return 2;
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (args.ignore_term) ::signal(SIGTERM, SIG_IGN);

  auto config = loom::Config::from_env();
  if (!config) {
    std::printf("rank ?: config: %s\n", config.status().to_string().c_str());
    return 1;
  }
  long env_rank = config->get_int("RANK");
  auto selected = [&](long rank) { return args.only_rank < 0 || args.only_rank == rank; };
  if (args.bad_token && selected(env_rank))
    (void)config->set("JOB_TOKEN", "00000000000000000000000000000000");

  std::vector<int> stray;  // kept open until the process ends
  if (args.flood > 0 && selected(env_rank)) {
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::string addr = config->get_string("BOOT_ADDR");
    std::memcpy(sa.sun_path, addr.data(), std::min(addr.size(), sizeof sa.sun_path - 1));
    for (int i = 0; i <= args.flood; ++i) {
      int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
        std::printf("rank %ld: flood connection %d: %s\n", env_rank, i, std::strerror(errno));
        return 1;
      }
      stray.push_back(fd);
    }
    // The last one claims a HELLO of 64 MiB and sends 1 MiB of it.
    std::string junk(6 + (1 << 20), 'x');
    uint32_t len = (64u << 20) - 6;
    uint16_t kind = 1;
    std::memcpy(junk.data(), &len, 4);
    std::memcpy(junk.data() + 4, &kind, 2);
    ::fcntl(stray.back(), F_SETFL, O_NONBLOCK);
    ssize_t n = ::send(stray.back(), junk.data(), junk.size(), MSG_NOSIGNAL);
    (void)n;
  }

  auto boot = loom::comm::make_bootstrap(*config);
  if (!boot) {
    std::printf("rank %ld: bootstrap: %s\n", env_rank, boot.status().to_string().c_str());
    return 1;
  }
  loom::comm::Bootstrap& b = **boot;
  const long rank = b.rank();
  const bool me = selected(rank);
  std::printf("rank %ld size %u pid %d\n", rank, b.size(), static_cast<int>(::getpid()));
  std::printf("token %s\n", b.job_token().c_str());

  // The server thread: reports what the launcher says about other nodes, like the runtime.
  int stop_fd = ::eventfd(0, EFD_CLOEXEC);
  std::thread server([&] {
    while (true) {
      pollfd p[2] = {{stop_fd, POLLIN, 0}, {b.event_fd(), POLLIN, 0}};
      int n = ::poll(p, b.event_fd() >= 0 ? 2 : 1, -1);
      if (n < 0) continue;
      if (p[0].revents) return;
      if (p[1].revents) {
        loom::Status s = b.handle_event();
        if (!s) fail(rank, "event", s.to_string());
      }
    }
  });
  auto stop_server = [&] {
    uint64_t one = 1;
    if (::write(stop_fd, &one, sizeof one) != sizeof one) std::abort();
    server.join();
  };

  if (me && args.kill_sig != 0) ::raise(args.kill_sig);
  if (me && !args.abort_reason.empty()) {
    std::printf("rank %ld: aborting\n", rank);
    b.abort_job(args.abort_reason);
    std::fflush(stdout);
    std::_Exit(1);
  }

  if (!me && args.others_delay_s > 0) sleep_for(args.others_delay_s);
  int rounds = me ? args.rounds : 1;
  for (int k = 0; k < rounds; ++k) {
    auto all = b.allgather(std::to_string(rank) + ":" + std::to_string(k));
    if (!all) fail(rank, "allgather", all.status().to_string());
    if (all->size() != b.size()) fail(rank, "allgather", std::to_string(all->size()) + " entries");
    for (size_t i = 0; i < all->size(); ++i) {
      std::string want = std::to_string(i) + ":" + std::to_string(k);
      if ((*all)[i] != want)
        fail(rank, "allgather",
             "entry " + std::to_string(i) + " is '" + (*all)[i] + "', want '" + want + "'");
    }
  }
  if (loom::Status s = b.barrier(); !s) fail(rank, "barrier", s.to_string());
  std::printf("rank %ld allgather ok\n", rank);
  for (int k = 0; me && k < args.extra_barriers; ++k) {
    if (loom::Status s = b.barrier(); !s) fail(rank, "extra barrier", s.to_string());
  }

  if (args.stats && rank != args.skip_stats_rank) {
    std::string path = config->get_string("STATS_JSON");
    size_t at = path.find("%r");
    if (at != std::string::npos) path.replace(at, 2, std::to_string(rank));
    std::ofstream(path) << "{\"rank\": " << rank << ", \"messages\": " << rank * 10 << "}\n";
  }
  if (!args.wait_file.empty()) {
    for (int i = 0; i < 2000 && ::access(args.wait_file.c_str(), F_OK) != 0; ++i) sleep_for(0.01);
  }
  if (me && args.sleep_s > 0) sleep_for(args.sleep_s);

  int code = me ? args.exit_code : 0;
  stop_server();
  if (!(me && args.no_bye)) b.finish(code);
  return code;
}

// fail_check: the program of the failure-injection tests (fail_matrix.sh). Every node runs ROUNDS
// rounds: it adds to a shared counter under a Loom mutex, then waits at a Loom barrier; at the
// end node 0 checks the counter. One node can fail on purpose in the run phase:
//
//   fail_check ROUNDS [VICTIM AT ACTION]
//
// node VICTIM, on reaching round AT, does ACTION:
//   kill      SIGKILL itself             stop      SIGSTOP itself
//   exit      exit(1)                    exit0     exit(0)
//   return    returns 0 from main (its loom::Session ends)
//   return1   returns 1 from main
//   finalize  calls loom::finalize() and then exits 0
// while the others wait for it at the barrier. Before acting it prints
// "loom[r] inject: run ACTION at <unix time>" on stderr, like LOOM_FAULT_INJECT does for the
// other phases. Every node prints "rank R pid P" first; node 0 prints "fail_check: N rounds ok".
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>

#include "loom/loom.hpp"

namespace {

struct Shared {
  long counter = 0;
  loom::mutex lock;
  loom::barrier round;
};

void say_inject(const std::string& action) {
  double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string line =
      fmt::format("loom[{}] inject: run {} at {:.6f}\n", loom::node_id(), action, now);
  ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
  (void)n;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 5) {
    std::fprintf(stderr, "usage: fail_check ROUNDS [VICTIM AT ACTION]\n");
    return 64;
  }
  long rounds = std::atol(argv[1]);
  int victim = argc == 5 ? std::atoi(argv[2]) : -1;
  long at = argc == 5 ? std::atol(argv[3]) : -1;
  std::string action = argc == 5 ? argv[4] : "";
  loom::Session session(&argc, &argv);
  int me = loom::node_id();
  std::printf("rank %d pid %d\n", me, static_cast<int>(::getpid()));
  std::fflush(stdout);
  Shared* s = nullptr;
  if (me == 0) {
    void* mem = loom::alloc(sizeof(Shared));
    s = new (mem) Shared{0, loom::mutex(), loom::barrier(static_cast<uint32_t>(loom::num_nodes()))};
  }
  s = loom::broadcast_ptr(s);
  for (long r = 0; r < rounds; ++r) {
    if (me == victim && r == at) {
      say_inject(action);
      if (action == "kill") ::kill(::getpid(), SIGKILL);
      if (action == "stop") ::kill(::getpid(), SIGSTOP);
      if (action == "exit") std::exit(1);
      if (action == "exit0") std::exit(0);
      if (action == "return") return 0;
      if (action == "return1") return 1;
      if (action == "finalize") {
        loom::finalize();
        return 0;
      }
    }
    {
      std::lock_guard<loom::mutex> g(s->lock);
      ++s->counter;
    }
    s->round.wait();
  }
  if (me == 0) {
    long want = rounds * loom::num_nodes();
    if (s->counter != want) {
      std::printf("FAILED: counter %ld, expected %ld\n", s->counter, want);
      return 1;
    }
    std::printf("fail_check: %ld rounds ok\n", rounds);
  }
  return 0;
}

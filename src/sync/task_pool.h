// TaskPool: the state machine of the thesis's `Pool` synchronization object (Chu, seeds/004,
// §5.2.5 and Appendix A), which balances blocks of work between threads that each keep a local
// pool, through a global pool (a stack of blocks) kept elsewhere, in shared memory.
//
// The object keeps only the control information: how many blocks the global pool holds, an
// approximation of the blocks in the whole system, each thread's blocks as of its last visit, who
// is moving blocks, who waits. A thread visits with GetAction(its blocks); the answer says how
// many blocks to take from the top of the global pool (> 0) or to put there (< 0), and where the
// top is; a thread that moves blocks calls Done afterwards, and only one thread moves blocks at a
// time (later visits that need a move wait for the Done). A thread with no block that finds the
// pool empty sleeps (its answer is deferred) until blocks arrive, or until every other thread
// sleeps too: then nothing is left anywhere and every thread is told to stop (top = -1).
//
// Balancing (the thesis's DistribJobs): a thread's share is jobs / threads, at least 1 while
// blocks remain; a thread holding fewer takes the difference (as far as the pool has them), one
// holding more puts its excess (as far as the pool has room).
//
// This class is only the state machine, so that one implementation serves the real object
// (bench/mandelbrot.cc, through loom/sync_object.hpp) and the simulator's scenario
// (src/sim/scenarios.cc, through sync::ObjectService): callers are named by tokens, and answers
// go out through a callback.
//
// Thread safety: none (an object's operations run one at a time).
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <vector>

namespace loom::sync {

class TaskPool {
 public:
  struct Action {
    int32_t blocks;  // > 0: take that many from the top; < 0: put that many; 0: neither
    int32_t top;     // the top before the move; -1: the computation has ended
  };
  using Token = uint64_t;  // a caller waiting for its Action
  using Answer = std::function<void(Token, Action)>;

  TaskPool(int32_t threads, int32_t capacity)
      : threads_(threads), capacity_(capacity), held_(static_cast<size_t>(threads), 0) {}

  // Init: the global pool holds `blocks` blocks again (and nobody else holds any).
  void init(int32_t blocks) {
    top_ = jobs_ = blocks;
    std::fill(held_.begin(), held_.end(), 0);
    in_use_ = false;
    queued_.clear();
    sleeping_.clear();
  }

  // GetAction: thread `thread`, holding `blocks` blocks, asks what to do; `caller` is answered
  // now or later (by a later get_action or done).
  void get_action(Token caller, int32_t thread, int32_t blocks, const Answer& answer) {
    jobs_ += blocks - held_[static_cast<size_t>(thread)];
    held_[static_cast<size_t>(thread)] = blocks;
    if (blocks == 0 && top_ == 0) {
      check_termination(caller, thread, answer);
      return;
    }
    distribute(caller, thread, blocks, answer);
  }

  // Done: the thread that was told to move blocks has moved them.
  void done(const Answer& answer) {
    in_use_ = false;
    if (top_ > 0 && !sleeping_.empty()) {
      const Waiting w = sleeping_.front();
      sleeping_.pop_front();
      distribute(w.caller, w.thread, 0, answer);
      return;
    }
    for (size_t n = queued_.size(); n > 0; --n) {
      const Waiting w = queued_.front();
      queued_.pop_front();
      if (w.blocks > 0 || top_ > 0) {
        distribute(w.caller, w.thread, w.blocks, answer);
        if (in_use_) return;  // that thread moves blocks now; the rest wait for its Done
      } else {
        check_termination(w.caller, w.thread, answer);
      }
    }
  }

 private:
  struct Waiting {
    Token caller;
    int32_t thread, blocks;
  };

  void distribute(Token caller, int32_t thread, int32_t blocks, const Answer& answer) {
    int32_t quota = jobs_ / threads_;
    if (quota == 0 && jobs_ > 0) quota = 1;
    if (blocks < quota)
      quota = std::min(quota - blocks, top_);
    else
      quota = -std::min(blocks - quota, capacity_ - top_);
    if (quota != 0) {
      if (in_use_) {  // another thread is moving blocks: wait for its Done
        queued_.push_back({caller, thread, blocks});
        return;
      }
      in_use_ = true;
    }
    const Action action{quota, top_};
    top_ -= quota;
    held_[static_cast<size_t>(thread)] = blocks + quota;
    answer(caller, action);
  }

  void check_termination(Token caller, int32_t thread, const Answer& answer) {
    if (static_cast<int32_t>(sleeping_.size()) == threads_ - 1) {
      for (const Waiting& s : sleeping_) answer(s.caller, Action{0, -1});
      sleeping_.clear();
      answer(caller, Action{0, -1});
      return;
    }
    sleeping_.push_back({caller, thread, 0});
  }

  const int32_t threads_, capacity_;
  std::vector<int32_t> held_;  // each thread's blocks at its last GetAction (proc_jobs)
  int32_t top_ = 0;            // blocks in the global pool
  int32_t jobs_ = 0;           // approximate blocks in the system (num_jobs)
  bool in_use_ = false;        // a thread is moving blocks (stack_in_use)
  std::deque<Waiting> queued_;    // GetAction calls waiting for in_use_ (the thesis's `mutex`)
  std::deque<Waiting> sleeping_;  // threads with nothing to do (the thesis's `empty`)
};

}  // namespace loom::sync

// object_check: multi-process checks of synchronization objects (loom/sync_object.hpp).
//
//   object_check attrs ROUNDS           release -> acquire visibility, acquire_release, none
//   object_check buffer THREADS ITEMS   a bounded buffer with deferred put/get, data through it
//   object_check library_buffer T ITEMS the same through the built-in loom::buffer
//   object_check waiters THREADS        every thread but one waits in a deferred get at once
//   object_check everywhere THREADS N   objects homed on every node, used from every thread
//   object_check semaphore THREADS N    a semaphore as a lock, and P(k) for k threads' V(1)
//   object_check condition THREADS N    threads take turns in order with a condition variable
//   object_check bad_handle             calling through a handle nobody created (must stop)
//
// Each mode fails with one "FAILED: node N: ..." line if what it names is broken.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "loom/sync_object.hpp"
#include "mp_util.h"

namespace {

using loom::nothing;
using loom::sync_attr;

// --- A mailbox: who deposited what, with each attribute ----------------------------------------

struct Mailbox {
  int64_t deposits = 0;  // how many deposit calls arrived
  int64_t last = -1;     // the last value deposited
};

loom::sync_class<Mailbox> mailbox_class("mailbox");
// Deposits `v` (release: the caller's writes become visible to the object).
const auto deposit = mailbox_class.op<int64_t, int64_t>("deposit", sync_attr::release,
                                                        [](Mailbox& m, const int64_t& v) {
                                                          m.last = v;
                                                          return ++m.deposits;
                                                        });
// Reads the last value (acquire: the object's view comes back with it).
const auto collect = mailbox_class.op<nothing, int64_t>(
    "collect", sync_attr::acquire, [](Mailbox& m, const nothing&) { return m.last; });
// The same read with no attribute: no view moves.
const auto peek = mailbox_class.op<nothing, int64_t>(
    "peek", sync_attr::none, [](Mailbox& m, const nothing&) { return m.last; });
// Deposit and read in one (acquire_release).
const auto exchange = mailbox_class.op<int64_t, int64_t>("exchange", sync_attr::acquire_release,
                                                         [](Mailbox& m, const int64_t& v) {
                                                           int64_t old = m.last;
                                                           m.last = v;
                                                           ++m.deposits;
                                                           return old;
                                                         });

uint64_t stat(const char* name) {
  nlohmann::json j = nlohmann::json::parse(loom::stats_json());
  return j.at("dsm").at(name).get<uint64_t>();
}

struct AttrsShared {
  loom::sync_object<Mailbox> box;
  loom::barrier all;
  int64_t data[512];  // one page and a bit: data[0] is what the rounds write
};

// Round r: writer w = r % n writes data[0] = 1000 + r after everyone has read (cached) the page,
// then deposits r with `release`; every other node polls `collect` (acquire) until it returns r
// and must then read 1000 + r. Under HLRC a reader that got no write notice keeps its stale copy,
// so a lost view fails the check. Then the same with `exchange` (acquire_release) as the release.
// Last, `peek` (no attribute) must bring no write notices.
int attrs(int rounds) {
  AttrsShared* sh = nullptr;
  if (mp::me() == 0) {
    sh = static_cast<AttrsShared*>(loom::alloc(sizeof(AttrsShared)));
    new (sh) AttrsShared{mailbox_class.create(0), loom::barrier(mp::nodes()), {}};
  }
  sh = loom::broadcast_ptr(sh, 0);
  const int n = mp::nodes();
  for (int r = 0; r < 2 * rounds; ++r) {
    const bool acq_rel = r >= rounds;
    const int writer = r % n;
    volatile int64_t seen = sh->data[0];  // cache the page everywhere
    (void)seen;
    sh->all.wait();
    if (mp::me() == writer) {
      sh->data[0] = 1000 + r;
      if (acq_rel)
        (void)exchange(sh->box, r);
      else
        (void)deposit(sh->box, r);
    } else {
      while (collect(sh->box, nothing{}) != r) {
      }
      mp::check(sh->data[0] == 1000 + r,
                "round " + std::to_string(r) + (acq_rel ? " (acquire_release)" : " (release)") +
                    ": after the object's value arrived with an acquire, data reads " +
                    std::to_string(sh->data[0]) + ", expected " + std::to_string(1000 + r));
    }
    sh->all.wait();
  }
  // No attribute: node 0 writes and deposits (release); the others peek until they see it and
  // must have received no write notice through the peeks.
  volatile int64_t seen = sh->data[0];
  (void)seen;
  sh->all.wait();
  const int64_t final_round = 2 * rounds;
  if (mp::me() == 0) {
    sh->data[0] = 77;
    (void)deposit(sh->box, final_round);
  } else {
    const uint64_t before = stat("notices_received");
    while (peek(sh->box, nothing{}) != final_round) {
    }
    const uint64_t after = stat("notices_received");
    mp::check(after == before, "a call with no attribute brought " +
                                   std::to_string(after - before) + " write notices");
  }
  sh->all.wait();
  if (mp::me() == 0) {
    sh->box.destroy();
    loom::free(sh);
    std::printf("attrs: %d rounds on %d nodes, OK\n", rounds, n);
  }
  return 0;
}

// --- A bounded buffer with deferred replies -----------------------------------------------------

constexpr int kCapacity = 4;

struct Buffer {
  int64_t items[kCapacity];
  int count = 0, head = 0;
  loom::deferred<int64_t> getters[1024];  // waiting get calls
  int getters_head = 0, getters_count = 0;
  struct Putter {
    loom::deferred<nothing> call;
    int64_t item;
  } putters[1024];  // waiting put calls and their items
  int putters_head = 0, putters_count = 0;
  int64_t max_waiting = 0;  // the most get calls waiting at once
};

loom::sync_class<Buffer> buffer_class("buffer");
// put: waits while the buffer is full. acquire_release: the producer's writes (the item's data)
// join the buffer's view once the item is in.
const auto put = buffer_class.deferrable_op<int64_t, nothing>(
    "put", sync_attr::acquire_release,
    [](Buffer& b, const int64_t& item, loom::sync_call<nothing>& call) {
      if (b.getters_count > 0) {  // a consumer waits: hand the item over
        // The producer first: its writes join the buffer's view only once it has been answered
        // (acquire_release), and the consumer's answer must carry them.
        call.reply(nothing{});
        call.reply_to(b.getters[b.getters_head], item);
        b.getters_head = (b.getters_head + 1) % 1024;
        --b.getters_count;
      } else if (b.count < kCapacity) {
        b.items[(b.head + b.count++) % kCapacity] = item;
        call.reply(nothing{});
      } else {
        b.putters[(b.putters_head + b.putters_count++) % 1024] = {call.defer(), item};
      }
    });
// get: waits while the buffer is empty. acquire: the consumer sees the producer's writes.
const auto get = buffer_class.deferrable_op<nothing, int64_t>(
    "get", sync_attr::acquire, [](Buffer& b, const nothing&, loom::sync_call<int64_t>& call) {
      if (b.count == 0) {
        b.getters[(b.getters_head + b.getters_count++) % 1024] = call.defer();
        b.max_waiting = std::max<int64_t>(b.max_waiting, b.getters_count);
        return;
      }
      call.reply(b.items[b.head]);
      b.head = (b.head + 1) % kCapacity;
      --b.count;
      if (b.putters_count > 0) {  // room now: take a waiting producer's item
        Buffer::Putter& p = b.putters[b.putters_head];
        b.items[(b.head + b.count++) % kCapacity] = p.item;
        call.reply_to(p.call, nothing{});
        b.putters_head = (b.putters_head + 1) % 1024;
        --b.putters_count;
      }
    });
const auto waiting_gets = buffer_class.op<nothing, int64_t>(
    "waiting_gets", sync_attr::none,
    [](Buffer& b, const nothing&) { return int64_t{b.getters_count}; });
const auto most_waiting = buffer_class.op<nothing, int64_t>(
    "most_waiting", sync_attr::none, [](Buffer& b, const nothing&) { return b.max_waiting; });

struct BufferShared {
  loom::sync_object<Buffer> buf;
  loom::buffer<int64_t> library;  // --library: the built-in loom::buffer instead
  loom::barrier all;
  int64_t payload[1];  // [total items]: item i's payload, written by its producer
};

// The threads of the job alternate between producers (even global index) and consumers (odd);
// each producer puts `items` items and each consumer gets as many. Item i's payload (i * 7 + 3)
// is written to shared memory before its put; the consumer that gets i must read it. Each item
// must be consumed exactly once. REQUIRES: an even number of threads in the job. `library`:
// the built-in loom::buffer (same capacity) instead of this file's Buffer class.
int buffer(int threads, int items, bool library) {
  const int all = threads * mp::nodes();
  if (all % 2 != 0) mp::fail("buffer needs an even number of threads in the job");
  const int64_t total = int64_t{all / 2} * items;
  BufferShared* sh = nullptr;
  if (mp::me() == 0) {
    sh = static_cast<BufferShared*>(
        loom::alloc(sizeof(BufferShared) + static_cast<size_t>(total) * sizeof(int64_t)));
    new (sh) BufferShared{
        library ? loom::sync_object<Buffer>() : buffer_class.create(mp::nodes() - 1),
        library ? loom::buffer<int64_t>(kCapacity, mp::nodes() - 1) : loom::buffer<int64_t>(),
        loom::barrier(static_cast<uint32_t>(all)),
        {}};
  }
  sh = loom::broadcast_ptr(sh, 0);
  auto put_item = [&](int64_t i) {
    if (library)
      sh->library.put(i);
    else
      (void)put(sh->buf, i);
  };
  auto get_item = [&] { return library ? sh->library.get() : get(sh->buf, nothing{}); };
  std::atomic<int64_t> sum{0}, count{0};
  mp::on_threads(threads, [&](int t) {
    const int g = mp::me() * threads + t;
    sh->all.wait();
    for (int k = 0; k < items; ++k) {
      if (g % 2 == 0) {
        const int64_t i = int64_t{g / 2} * items + k;
        sh->payload[i] = i * 7 + 3;
        put_item(i);
        continue;
      }
      const int64_t item = get_item();
      mp::check(item >= 0 && item < total, "get returned item " + std::to_string(item));
      const int64_t want = item * 7 + 3;
      mp::check(sh->payload[item] == want, "item " + std::to_string(item) + ": its payload reads " +
                                               std::to_string(sh->payload[item]) +
                                               " after get, expected " + std::to_string(want));
      sum += item;
      ++count;
    }
    sh->all.wait();
  });
  // Every node's sum of consumed items; node totals meet in shared memory.
  int64_t* totals = nullptr;
  if (mp::me() == 0) totals = loom::alloc_array<int64_t>(2 * static_cast<size_t>(mp::nodes()));
  totals = loom::broadcast_ptr(totals, 0);
  totals[2 * mp::me()] = sum.load();
  totals[2 * mp::me() + 1] = count.load();
  (void)loom::broadcast_ptr(totals, 0);
  if (mp::me() == 0) {
    int64_t s = 0, c = 0;
    for (int k = 0; k < mp::nodes(); ++k) {
      s += totals[2 * k];
      c += totals[2 * k + 1];
    }
    mp::check(c == total,
              "consumed " + std::to_string(c) + " items, produced " + std::to_string(total));
    mp::check(s == total * (total - 1) / 2,
              "the consumed items' sum is " + std::to_string(s) + ", expected " +
                  std::to_string(total * (total - 1) / 2) + " (an item lost or repeated)");
    if (library) {
      std::printf("buffer: %lld items through a %d-slot loom::buffer, OK\n",
                  static_cast<long long>(total), kCapacity);
      sh->library.destroy();
    } else {
      const int64_t waited = most_waiting(sh->buf, nothing{});
      std::printf("buffer: %lld items through a %d-slot buffer, at most %lld gets waiting, OK\n",
                  static_cast<long long>(total), kCapacity, static_cast<long long>(waited));
      sh->buf.destroy();
    }
    loom::free(totals);
    loom::free(sh);
  }
  return 0;
}

// Many waiters, deterministically: every thread of the job but one calls get on an empty buffer
// (all deferred: the object answers none of them yet); the remaining thread (node 0, thread 0)
// waits until the object counts them all waiting, then writes each item's payload and puts it.
// Each getter must read its item's payload.
int waiters(int threads) {
  const int all = threads * mp::nodes();
  BufferShared* sh = nullptr;
  if (mp::me() == 0) {
    sh = static_cast<BufferShared*>(
        loom::alloc(sizeof(BufferShared) + static_cast<size_t>(all) * sizeof(int64_t)));
    new (sh) BufferShared{buffer_class.create(mp::nodes() / 2),
                          loom::buffer<int64_t>(),
                          loom::barrier(static_cast<uint32_t>(all)),
                          {}};
  }
  sh = loom::broadcast_ptr(sh, 0);
  std::atomic<int> got{0};
  mp::on_threads(threads, [&](int t) {
    const int g = mp::me() * threads + t;
    sh->all.wait();
    if (g == 0) {
      while (waiting_gets(sh->buf, nothing{}) != all - 1) {
      }
      for (int64_t i = 0; i < all - 1; ++i) {
        sh->payload[i] = i * 7 + 3;
        (void)put(sh->buf, i);
      }
    } else {
      const int64_t item = get(sh->buf, nothing{});
      mp::check(item >= 0 && item < all - 1 && sh->payload[item] == item * 7 + 3,
                "a deferred get returned item " + std::to_string(item) + " with payload " +
                    std::to_string(item >= 0 && item < all ? sh->payload[item] : -1));
      ++got;
    }
    sh->all.wait();
  });
  (void)loom::broadcast_ptr(sh, 0);
  if (mp::me() == 0) {
    std::printf("waiters: %d gets deferred at once, all answered, OK\n", all - 1);
    sh->buf.destroy();
    loom::free(sh);
  }
  return 0;
}

// --- Objects on every node, from every thread ---------------------------------------------------

struct Tally {
  explicit Tally(int64_t start) : value(start) {}
  int64_t value;
  int64_t calls = 0;
};
loom::sync_class<Tally, int64_t> tally_class("tally");
const auto add = tally_class.op<int64_t, int64_t>("add", sync_attr::release_acquire,
                                                  [](Tally& t, const int64_t& k) {
                                                    ++t.calls;
                                                    return t.value += k;
                                                  });
struct TallyView {
  int64_t value, calls;
};
const auto read_tally =
    tally_class.op<nothing, TallyView>("read", sync_attr::acquire, [](Tally& t, const nothing&) {
      return TallyView{t.value, t.calls};
    });

// One tally per node, homed there, starting at 1000 * node. Every thread of every node adds
// (its global index + 1) to every tally `n` times, and creates and destroys objects of its own
// on the way (homes round-robin). At the end each tally must hold its start plus the sum.
int everywhere(int threads, int n) {
  const int nodes = mp::nodes();
  loom::sync_object<Tally>* tallies = nullptr;
  if (mp::me() == 0) {
    tallies = loom::alloc_array<loom::sync_object<Tally>>(static_cast<size_t>(nodes));
    for (int k = 0; k < nodes; ++k) tallies[k] = tally_class.create(k, int64_t{1000} * k);
  }
  tallies = loom::broadcast_ptr(tallies, 0);
  mp::on_threads(threads, [&](int t) {
    const int g = mp::me() * threads + t;
    for (int i = 0; i < n; ++i) {
      for (int k = 0; k < nodes; ++k) (void)add(tallies[k], g + 1);
      if (i % 8 == 0) {  // a short-lived object of this thread's own, somewhere
        loom::sync_object<Tally> mine = tally_class.create((g + i) % nodes, int64_t{i});
        mp::check(add(mine, 1) == i + 1, "a fresh object's first add");
        mp::check(read_tally(mine, nothing{}).calls == 1, "a fresh object's call count");
        mine.destroy();
      }
    }
  });
  (void)loom::broadcast_ptr(tallies, 0);
  const int64_t p = int64_t{threads} * nodes;
  for (int k = 0; k < nodes; ++k) {
    const TallyView got = read_tally(tallies[k], nothing{});
    const int64_t want = int64_t{1000} * k + n * p * (p + 1) / 2;
    mp::check(got.value == want, "tally on node " + std::to_string(k) + " holds " +
                                     std::to_string(got.value) + ", expected " +
                                     std::to_string(want));
    mp::check(got.calls == n * p, "tally on node " + std::to_string(k) + " counted " +
                                      std::to_string(got.calls) + " calls");
  }
  (void)loom::broadcast_ptr(tallies, 0);
  if (mp::me() == 0) {
    for (int k = 0; k < nodes; ++k) tallies[k].destroy();
    loom::free(tallies);
    std::printf("everywhere: %d nodes x %d threads, %d rounds, OK\n", nodes, threads, n);
  }
  return 0;
}

// A semaphore used as a lock (initial count 1, home: the last node): every thread increments a
// shared counter (a plain read-modify-write) `n` times between P and V; then each V(1)s a second
// semaphore that node 0 P(k)s for all of them at once. A lost P/V exclusion or a V that does not
// release loses increments.
struct SemShared {
  loom::semaphore lock, finished;
  int64_t counter;
};
int semaphore_check(int threads, int n) {
  const int all = threads * mp::nodes();
  SemShared* sh = nullptr;
  if (mp::me() == 0) {
    sh = static_cast<SemShared*>(loom::alloc(sizeof(SemShared)));
    new (sh) SemShared{loom::semaphore(1, mp::nodes() - 1), loom::semaphore(0, 0), 0};
  }
  sh = loom::broadcast_ptr(sh, 0);
  mp::on_threads(threads, [&](int t) {
    for (int i = 0; i < n; ++i) {
      sh->lock.P();
      sh->counter = sh->counter + 1;
      sh->lock.V();
    }
    if (mp::me() == 0 && t == 0) {
      sh->finished.P(all - 1);  // every other thread's V(1)
      mp::check(sh->counter == int64_t{all} * n,
                "the counter holds " + std::to_string(sh->counter) + ", expected " +
                    std::to_string(int64_t{all} * n) + " (increments lost)");
      std::printf("semaphore: %d threads x %d P/V, P(%d) at the end, OK\n", all, n, all - 1);
    } else {
      sh->finished.V();
    }
  });
  (void)loom::broadcast_ptr(sh, 0);
  if (mp::me() == 0) {
    sh->lock.destroy();
    sh->finished.destroy();
    loom::free(sh);
  }
  return 0;
}

// Turns with a condition variable: threads take turns in order of their global index, `n`
// rounds; a thread waits (cond.wait with the mutex) until `turn` names it, then passes the turn
// on and broadcasts. A lost wake-up hangs the job (the test's timeout fails it); a stale `log`
// entry means the mutex taken again after the wake-up did not bring the previous turn's writes.
struct CondShared {
  loom::mutex m;
  loom::condition turn_changed;
  int64_t turn;
  int64_t log[1];  // [rounds * threads]: who took each turn
};
int condition_check(int threads, int n) {
  const int all = threads * mp::nodes();
  CondShared* sh = nullptr;
  if (mp::me() == 0) {
    sh = static_cast<CondShared*>(
        loom::alloc(sizeof(CondShared) + sizeof(int64_t) * static_cast<size_t>(all) * n));
    new (sh) CondShared{loom::mutex(), loom::condition(mp::nodes() / 2), 0, {}};
  }
  sh = loom::broadcast_ptr(sh, 0);
  mp::on_threads(threads, [&](int t) {
    const int g = mp::me() * threads + t;
    for (int r = 0; r < n; ++r) {
      std::unique_lock<loom::mutex> l(sh->m);
      while (sh->turn % all != g) sh->turn_changed.wait(sh->m);
      if (sh->turn > 0)
        mp::check(sh->log[sh->turn - 1] == (g + all - 1) % all,
                  "turn " + std::to_string(sh->turn) + ": the previous turn's log entry is stale");
      sh->log[sh->turn] = g;
      ++sh->turn;
      sh->turn_changed.broadcast();
    }
  });
  (void)loom::broadcast_ptr(sh, 0);
  if (mp::me() == 0) {
    mp::check(sh->turn == int64_t{all} * n, "turns taken: " + std::to_string(sh->turn));
    std::printf("condition: %d threads took %d turns each in order, OK\n", all, n);
    sh->turn_changed.destroy();
    loom::free(sh);
  }
  return 0;
}

int bad_handle() {
  loom::sync_object<Mailbox> nobody;  // never created
  std::printf("calling through a handle nobody created\n");
  std::fflush(stdout);
  (void)collect(nobody, nothing{});
  std::printf("FAILED: the call returned\n");
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: object_check MODE ...\n");
    return 2;
  }
  const std::string mode = argv[1];
  auto arg = [&](int i, long def) { return argc > i ? static_cast<int>(std::atol(argv[i])) : def; };
  loom::init(&argc, &argv);
  int rc = 2;
  if (mode == "attrs")
    rc = attrs(static_cast<int>(arg(2, 20)));
  else if (mode == "buffer")
    rc = buffer(static_cast<int>(arg(2, 2)), static_cast<int>(arg(3, 50)), false);
  else if (mode == "library_buffer")
    rc = buffer(static_cast<int>(arg(2, 2)), static_cast<int>(arg(3, 50)), true);
  else if (mode == "waiters")
    rc = waiters(static_cast<int>(arg(2, 2)));
  else if (mode == "everywhere")
    rc = everywhere(static_cast<int>(arg(2, 2)), static_cast<int>(arg(3, 20)));
  else if (mode == "semaphore")
    rc = semaphore_check(static_cast<int>(arg(2, 2)), static_cast<int>(arg(3, 100)));
  else if (mode == "condition")
    rc = condition_check(static_cast<int>(arg(2, 2)), static_cast<int>(arg(3, 20)));
  else if (mode == "bad_handle")
    rc = bad_handle();
  else
    std::fprintf(stderr, "object_check: unknown mode %s\n", mode.c_str());
  loom::finalize();
  return rc;
}

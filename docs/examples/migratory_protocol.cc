// A consistency protocol written outside Loom's src/: single-copy page migration.
//
// Every page of a "migratory" allocation exists in exactly one copy, at its *holder*. Any access
// by another node moves the page there (the whole page travels; nothing is ever invalidated,
// because nothing is ever copied). With one copy there is nothing to keep coherent, so the
// protocol is sequentially consistent. It suits data that one node at a time works on, like a
// work item passed along; it is the simplest protocol that still shows every part of the
// platform (docs/protocols/README.md):
//
//   - the fault action (on_fault) waits for the page on the application thread;
//   - the page's home acts as its manager: it knows the holder and moves the page one request at
//     a time, with deferred replies (a handler never waits: it keeps the requester's ReplyTo and
//     answers once the holder has given the page up);
//   - messages are the protocol's own (Core::msg): want (requester -> home, request: the reply is
//     the page), surrender (home -> holder, request: the reply is the page) and got (new holder ->
//     home, one way: the page arrived; only then may the home move it again, so a surrender can
//     never overtake the page it asks for).
//
// Registered by name before loom::init() and chosen per allocation, like the built-in protocols:
//
//   loom::protocols::register_protocol("migratory", make_migratory);
//   loom::Session session(&argc, &argv);
//   int* x = loom::alloc_array<int>(1024, {.protocol = "migratory"});
//
// The main() below is also the example's test (tests/mp: proto.example_migratory_*): a
// lock-protected counter, barrier-phased writes by every node to one page, and a token passed
// from node to node through plain memory (which needs sequential consistency).
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/log.h"
#include "loom/loom.hpp"
#include "protocols/protocol.h"

namespace {

using loom::Status;
using loom::memory::kPageBytes;
using loom::memory::PageEntry;
using loom::memory::PageId;
using loom::memory::Prot;

enum : uint8_t { kAbsent = 1, kHolder = 2 };  // PageEntry::state (0: never used here)

class Migratory final : public loom::protocols::Protocol {
 public:
  explicit Migratory(const loom::protocols::Core& core)
      : comm_(core.comm),
        frames_(core.frames),
        table_(core.table),
        me_(core.comm.rank()),
        kWant(core.msg(0)),
        kSurrender(core.msg(1)),
        kGot(core.msg(2)) {}

  Status register_messages() override {
    auto& reg = comm_.registry();
    if (Status s =
            reg.add(kWant, "mig.want", [this](loom::comm::Incoming& in) { return on_want(in); });
        !s)
      return s;
    if (Status s = reg.add(kSurrender, "mig.surrender",
                           [this](loom::comm::Incoming& in) { return on_surrender(in); });
        !s)
      return s;
    return reg.add(kGot, "mig.got", [this](loom::comm::Incoming& in) { return on_got(in); });
  }

  // Fault action: fetch the page through its home (one fetch per page and node at a time).
  bool on_fault(void* addr, bool is_write) override {
    (void)is_write;  // the holder may read and write
    const PageId page = frames_.page_of(addr);
    PageEntry& e = table_.at(page);
    int32_t home;
    {
      loom::MutexLock l(table_.lock_of(page));
      for (;;) {
        if (e.state == kHolder) {  // another local thread brought it meanwhile
          frames_.protect(page, 1, e.prot);
          return true;
        }
        if (!e.fetching) break;
        table_.cv_of(page).wait(table_.lock_of(page));
      }
      e.fetching = true;
      home = e.home;
    }
    loom::Result<loom::comm::Buffer> data =
        comm_.call(static_cast<loom::comm::NodeId>(home), kWant, as_bytes(page));
    LOOM_CHECK(data.is_ok() && data->size() == kPageBytes, "migratory: page {} from node {}: {}",
               page, home, data.is_ok() ? "wrong size" : data.status().to_string());
    {
      loom::MutexLock l(table_.lock_of(page));
      std::memcpy(frames_.sys_page(page), data->data(), kPageBytes);
      e.state = kHolder;
      e.prot = Prot::kReadWrite;
      e.fetching = false;
      frames_.protect(page, 1, e.prot);
      table_.notify(page);
    }
    // note: sent after the page is usable here; the home moves it again only after this.
    LOOM_CHECK(comm_.send(static_cast<loom::comm::NodeId>(home), kGot, as_bytes(page)).is_ok(),
               "migratory: telling node {} that page {} arrived", home, page);
    return true;
  }

  // One copy: nothing to do at synchronization.
  void release() override {}
  void acquire() override {}

  std::string dump_page(PageId page) override {
    PageEntry* e = table_.find(page);
    return e == nullptr ? fmt::format("page {}: no entry", page)
                        : fmt::format("page {} on node {} (migratory): home={} state={}", page, me_,
                                      e->home, e->state);
  }

 private:
  struct Move {  // a request the home could not serve yet
    loom::comm::NodeId to;
    loom::comm::ReplyTo reply;
  };
  struct Managed {        // the home's record of one of its pages
    int32_t holder = -1;  // -1: the home itself, never moved yet
    bool moving = false;  // a move is in flight (until the new holder says got)
    std::deque<Move> waiting;
  };

  static std::span<const std::byte> as_bytes(const PageId& page) {
    return {reinterpret_cast<const std::byte*>(&page), sizeof page};
  }
  static bool read_page(loom::comm::Incoming& in, PageId* page) {
    if (in.payload().size() != sizeof *page) return false;
    std::memcpy(page, in.payload().data(), sizeof *page);
    return true;
  }

  // The holder (any node, the home included) gives the page up: the reply is its contents.
  std::vector<std::byte> give_up(PageId page) {
    PageEntry& e = table_.at(page);
    loom::MutexLock l(table_.lock_of(page));
    LOOM_CHECK(e.state == kHolder || e.state == 0,
               "migratory: node {} asked to give up page {} "
               "it does not hold: {}",
               me_, page, dump_page(page));
    e.state = kAbsent;
    e.prot = Prot::kNone;
    frames_.protect(page, 1, Prot::kNone);  // local threads fault from now on
    const std::byte* p = frames_.sys_page(page);
    return {p, p + kPageBytes};
  }

  // Home: move `page` to `m.to`. REQUIRES: on the dispatcher, not moving.
  void start_move(PageId page, Managed& rec, Move m) {
    rec.moving = true;
    int32_t from = rec.holder < 0 ? static_cast<int32_t>(me_) : rec.holder;
    rec.holder = static_cast<int32_t>(m.to);
    if (from == static_cast<int32_t>(me_)) {
      std::vector<std::byte> data = give_up(page);
      (void)comm_.reply(m.reply, data);
      return;
    }
    // Deferred reply: ask the holder, answer the requester from the callback.
    Status s = comm_.start_request(static_cast<loom::comm::NodeId>(from), kSurrender,
                                   as_bytes(page), [this, m](Status st, loom::comm::Buffer data) {
                                     if (st.is_ok())
                                       (void)comm_.reply(m.reply, data.span());
                                     else
                                       (void)comm_.reply_error(m.reply, st);
                                   });
    if (!s) (void)comm_.reply_error(m.reply, s);
  }

  Status on_want(loom::comm::Incoming& in) {
    PageId page;
    if (!read_page(in, &page) || page >= frames_.num_pages())
      return Status::malformed("mig.want: bad page");
    Managed& rec = managed_[page];
    Move m{in.src(), in.reply_to()};
    if (rec.moving)
      rec.waiting.push_back(m);
    else
      start_move(page, rec, m);
    return Status::ok();
  }

  Status on_surrender(loom::comm::Incoming& in) {
    PageId page;
    if (!read_page(in, &page) || page >= frames_.num_pages())
      return Status::malformed("mig.surrender: bad page");
    std::vector<std::byte> data = give_up(page);
    return comm_.reply(in.reply_to(), data);
  }

  Status on_got(loom::comm::Incoming& in) {
    PageId page;
    if (!read_page(in, &page) || page >= frames_.num_pages())
      return Status::malformed("mig.got: bad page");
    Managed& rec = managed_[page];
    if (!rec.moving || rec.holder != static_cast<int32_t>(in.src()))
      return Status::malformed(
          fmt::format("mig.got for page {} from node {}, which it was not "
                      "moving to",
                      page, in.src()));
    rec.moving = false;
    if (!rec.waiting.empty()) {
      Move next = rec.waiting.front();
      rec.waiting.pop_front();
      start_move(page, rec, next);
    }
    return Status::ok();
  }

  loom::comm::Comm& comm_;
  loom::memory::PageFrames& frames_;
  loom::memory::PageTable& table_;
  const loom::comm::NodeId me_;
  const loom::comm::MsgType kWant, kSurrender, kGot;
  // Pages this node is the home of. Only handlers and request callbacks touch it, and they all
  // run on the dispatcher (the server thread), one at a time: no lock (a lock held while
  // replying would also invert the transport's lock order).
  std::unordered_map<PageId, Managed> managed_;
};

std::unique_ptr<loom::protocols::Protocol> make_migratory(const loom::protocols::Core& core) {
  return std::make_unique<Migratory>(core);
}

// --- The example's own test -------------------------------------------------------------------

[[noreturn]] void fail(const std::string& what) {
  std::printf("FAILED: node %d: %s\n", loom::node_id(), what.c_str());
  std::fflush(stdout);
  std::_Exit(1);
}

struct Shared {
  loom::mutex lock;
  loom::barrier bar;
  uint64_t* counter;  // migratory
  uint64_t* words;    // migratory, one word per node on one page
  uint64_t* token;    // migratory: whose turn it is
};

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 200;
  if (Status s = loom::protocols::register_protocol("migratory", make_migratory); !s) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 2;
  }
  loom::Session session(&argc, &argv);
  const int me = loom::node_id(), n = loom::num_nodes();
  loom::AllocOptions mig;
  mig.protocol = "migratory";
  Shared* sh = nullptr;
  if (me == 0) {
    sh = static_cast<Shared*>(loom::alloc(sizeof(Shared)));
    new (sh) Shared{loom::mutex(), loom::barrier(static_cast<uint32_t>(n * threads)),
                    loom::alloc_array<uint64_t>(1, mig), loom::alloc_array<uint64_t>(512, mig),
                    loom::alloc_array<uint64_t>(1, mig)};
  }
  sh = loom::broadcast_ptr(sh, 0);
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      loom::barrier b = sh->bar;
      for (int r = 0; r < rounds; ++r) {
        std::lock_guard<loom::mutex> g(sh->lock);
        ++*sh->counter;
      }
      sh->words[me * threads + t] = static_cast<uint64_t>(1000 + me * threads + t);
      b.wait();
      uint64_t want = static_cast<uint64_t>(n) * threads * rounds;
      if (*sh->counter != want)
        fail(fmt::format("counter {} after the barrier, expected {}", *sh->counter, want));
      for (int k = 0; k < n * threads; ++k)
        if (sh->words[k] != static_cast<uint64_t>(1000 + k))
          fail(fmt::format("word {} is {}", k, sh->words[k]));
    });
  }
  for (auto& t : ts) t.join();
  // A token passed around the nodes through plain memory: node k waits until the token is k,
  // then hands it to k + 1. Only a sequentially consistent page makes this terminate.
  auto* token = reinterpret_cast<volatile uint64_t*>(sh->token);
  for (int r = 0; r < 20; ++r) {
    uint64_t mine = static_cast<uint64_t>(r * n + me);
    while (*token != mine) {
    }
    *token = mine + 1;
  }
  loom::broadcast_ptr(nullptr, 0);
  std::printf("ok: migratory node %d: counter %llu, %d words, token %llu\n", me,
              static_cast<unsigned long long>(*sh->counter), n * threads,
              static_cast<unsigned long long>(*token));
  return 0;
}

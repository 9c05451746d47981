#include "sim/sim.h"

#include <fmt/format.h>
#include <sched.h>

#include <cstring>
#include <iostream>

#include "base/coop.h"
#include "base/log.h"
#include "comm/comm.h"
#include "comm/wire.h"
#include "memory/page_table.h"
#include "sim/frames.h"
#include "sim/network.h"
#include "sync/barriers.h"
#include "sync/conds.h"
#include "sync/locks.h"

namespace loom::sim {

namespace hl = protocols::hlrc;

namespace {
// Where the simulated region pretends to be. Nothing is mapped there: simulated accesses never
// dereference application addresses.
constexpr uintptr_t kRegionBase = 0x600000000000;

// Region size: room for every node to take a 4 MiB heap chunk, at least 256 MiB.
size_t region_bytes(uint32_t nodes) {
  size_t chunk = memory::Heap::kChunkPages * memory::kPageBytes;
  return std::max<size_t>(size_t{256} << 20, size_t{nodes} * chunk);
}
}  // namespace

uint64_t lock_id(uint32_t k) { return sync::kLockTag | (uint64_t{0xfffe} << 32) | k; }
uint64_t cond_id(uint32_t k) { return sync::kCondTag | (uint64_t{0xfffe} << 32) | k; }
uint64_t barrier_id(uint32_t k) { return sync::kBarrierTag | (uint64_t{0xfffe} << 32) | k; }

// --- Threads and turns ------------------------------------------------------------------------

struct SimThread {
  enum class State { kNew, kReady, kRunning, kBlocked, kDone };
  uint32_t node = 0, id = 0;
  std::function<void(Thread&)> body;
  Thread api;
  std::thread os;
  Baton go;
  State state = State::kNew;
  std::function<bool()> ready;
  std::string_view what;
};

// Installed on each simulated thread: blocking hands the turn back to the scheduler.
class Simulation::ThreadTurn final : public CoopScheduler {
 public:
  ThreadTurn(Simulation& sim, SimThread& t) : sim_(sim), t_(t) {}
  void block_until(std::function<bool()> ready, std::string_view what) override {
    t_.ready = std::move(ready);
    t_.what = what;
    t_.state = SimThread::State::kBlocked;
    sim_.pass_turn(t_);
    t_.state = SimThread::State::kRunning;
  }

 private:
  Simulation& sim_;
  SimThread& t_;
};

// Installed on the scheduler's thread while it runs a message handler: handlers never block, so
// a handler that would is a bug in the protocol, reported with the trace.
class Simulation::HandlerTurn final : public CoopScheduler {
 public:
  void block_until(std::function<bool()> ready, std::string_view what) override {
    if (ready()) return;
    log::fatal(fmt::format("simulator: a message handler would block (on a {})", what));
  }
};

// --- Nodes --------------------------------------------------------------------------------------

struct Simulation::Node {
  std::unique_ptr<comm::Comm> comm;
  std::unique_ptr<memory::PageTable> table;
  std::unique_ptr<SimFrames> frames;
  std::unique_ptr<memory::Heap> heap;
  std::unique_ptr<hl::Hlrc> hlrc;
  std::unique_ptr<protocols::Platform> platform;  // HLRC and every other registered protocol
  std::unique_ptr<sync::LockService> locks;
  std::unique_ptr<sync::BarrierService> barriers;
  std::unique_ptr<sync::CondService> conds;
  std::unique_ptr<sync::ObjectService> objects;
};

Simulation::Simulation(Options options)
    : opts_(options), rng_(options.seed), net_(std::make_unique<SimNetwork>(options.nodes)) {
  LOOM_CHECK(opts_.nodes >= 1, "a simulation needs at least one node");
  const protocols::ProtocolId default_protocol = protocols::protocol_id(opts_.protocol);
  LOOM_CHECK(default_protocol != memory::kProtocolUnknown, "no protocol named {}", opts_.protocol);
  size_t bytes = region_bytes(opts_.nodes);
  for (uint32_t n = 0; n < opts_.nodes; ++n) {
    auto node = std::make_unique<Node>();
    comm::CommOptions copts;
    copts.manual_timers = true;  // fired by the scheduler (run())
    node->comm = std::make_unique<comm::Comm>(net_->endpoint(n), copts);
    node->comm->set_fatal_handler([this, n](const Status& why) {
      fail(Status(why.code(), fmt::format("node {}: {}", n, why.message())));
    });
    node->frames = std::make_unique<SimFrames>(kRegionBase, bytes, opts_.write_tracking);
    // note: small stripes and blocks keep a simulated node's page table to a few kilobytes.
    node->table = std::make_unique<memory::PageTable>(node->frames->num_pages(),
                                                      memory::PageTable::Geometry{16, 9});
    node->heap =
        std::make_unique<memory::Heap>(*node->comm, *node->frames, *node->table, default_protocol);
    node->hlrc = std::make_unique<hl::Hlrc>(*node->comm, *node->frames, *node->table, *node->heap,
                                            opts_.hlrc);
    node->platform = std::make_unique<protocols::Platform>(*node->frames, *node->table, *node->heap,
                                                           *node->hlrc);
    node->platform->add(node->hlrc.get(), nullptr);
    for (size_t id = 1; id < protocols::protocol_names().size(); ++id) {
      auto pid = static_cast<protocols::ProtocolId>(id);
      protocols::Core core{*node->comm, *node->frames, *node->table, *node->heap, pid, nullptr};
      std::unique_ptr<protocols::Protocol> p = protocols::make_protocol(pid, core);
      if (auto* lrc = dynamic_cast<protocols::lrc::LrcMw*>(p.get()); lrc != nullptr) {
        lrc->set_mutant(opts_.lrc_mutant);
        if (opts_.lrc_gc_bytes != 0) lrc->set_gc_bytes(opts_.lrc_gc_bytes);
      }
      if (auto* so = dynamic_cast<protocols::single::SingleOwner*>(p.get()); so != nullptr)
        so->set_mutant(opts_.single_mutant);
      protocols::Protocol* raw = p.get();
      node->platform->add(raw, std::move(p));
    }
    sync::LockPolicy lock_policy;
    lock_policy.fairness = opts_.lock_fairness;
    // note: any positive window: the schedule, not a clock, decides when it ends.
    lock_policy.keep_ns = opts_.lock_keep ? 1 : 0;
    lock_policy.lazy = opts_.lazy_release;
    lock_policy.push = opts_.lock_push;
    node->locks = std::make_unique<sync::LockService>(*node->comm, *node->platform, lock_policy);
    node->barriers = std::make_unique<sync::BarrierService>(*node->comm, *node->platform,
                                                            node->frames->num_pages());
    node->conds = std::make_unique<sync::CondService>(*node->comm, *node->locks);
    node->objects = std::make_unique<sync::ObjectService>(*node->comm, *node->platform);
    node->objects->set_mutant_no_view(opts_.object_no_view);
    for (Status s : {node->heap->register_messages(), node->platform->register_messages(),
                     node->locks->register_messages(), node->barriers->register_messages(),
                     node->conds->register_messages(), node->objects->register_messages()})
      LOOM_CHECK(s.is_ok(), "simulated node {}: {}", n, s.to_string());
    nodes_.push_back(std::move(node));
  }
  dumper_ = log::add_state_dumper([this] {
    std::cerr << fmt::format("simulation (seed {}, step {}), last events:\n{}", opts_.seed, steps_,
                             trace_tail());
  });
}

Simulation::~Simulation() {
  log::remove_state_dumper(dumper_);
  if (failed() && running_) {
    abandon();
    return;
  }
  for (auto& t : threads_)
    if (t->os.joinable()) t->os.join();
}

// note: threads parked inside protocol code hold pointers into the nodes and into their own
// stacks; nothing can be torn down safely. Leak it all (the process is about to report and end).
void Simulation::abandon() {
  for (auto& t : threads_) {
    if (t->os.joinable()) t->os.detach();
    (void)t.release();
  }
  for (auto& n : nodes_) (void)n.release();
  (void)net_.release();
}

uint64_t Simulation::region_base() const { return kRegionBase; }

void Simulation::spawn(uint32_t node, std::function<void(Thread&)> body) {
  LOOM_CHECK(!running_, "spawn() after run()");
  LOOM_CHECK(node < opts_.nodes, "no node {} in a {}-node simulation", node, opts_.nodes);
  auto t = std::make_unique<SimThread>();
  t->node = node;
  t->id = static_cast<uint32_t>(threads_.size());
  t->body = std::move(body);
  t->api.sim_ = this;
  t->api.self_ = t.get();
  threads_.push_back(std::move(t));
}

std::string Simulation::thread_name(const SimThread& t) const {
  return fmt::format("t{}@{}", t.id, t.node);
}

void Simulation::fail(Status why) {
  if (failure_.is_ok()) failure_ = std::move(why);
}

void Simulation::note(const std::string& event) {
  for (char c : event) hash_ = (hash_ ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  hash_ = (hash_ ^ '\n') * 1099511628211ull;
  if (opts_.print_trace) std::cerr << event << '\n';
  if (opts_.trace_tail == 0) return;
  if (tail_.size() == opts_.trace_tail) tail_.pop_front();
  tail_.push_back(event);
}

std::string Simulation::trace_tail() const {
  std::string out;
  for (const std::string& e : tail_) out += "  " + e + "\n";
  return out;
}

// --- Scheduling ---------------------------------------------------------------------------------

void Simulation::start(SimThread& t) {
  if (t.state == SimThread::State::kNew) {
    t.state = SimThread::State::kRunning;
    t.os = std::thread([this, &t] {
      ThreadTurn turn(*this, t);
      set_coop_scheduler(&turn);
      t.go.wait();
      t.body(t.api);
      set_coop_scheduler(nullptr);
      t.state = SimThread::State::kDone;
      pass_turn(t);
    });
  }
  t.go.post();
}

// note: the thread that ends its turn makes the next choice itself, exactly as the scheduler's
// loop would (same state, same generator), and hands the turn straight to the thread chosen, or
// keeps it: a step from one thread to another costs one thread switch instead of two, and a
// thread chosen again costs none. Messages are delivered on the scheduler's thread only, so
// handlers run on one thread, as on a node's server thread.
void Simulation::pass_turn(SimThread& me) {
  const bool ended = me.state == SimThread::State::kDone;
  Step next = decide();
  if (next.kind == Step::kThread && threads_[next.index].get() == &me) return;
  if (next.kind == Step::kThread) {
    start(*threads_[next.index]);
  } else {
    handed_ = next;
    back_.post();
  }
  if (!ended) me.go.wait();
}

void Simulation::deliver(size_t i) {
  if (opts_.tamper) {
    InFlight& t = net_->at(i);
    if (Result<comm::WireHeader> h =
            comm::decode_header(t.header, t.payload.size(), opts_.nodes, 1);
        h) {
      opts_.tamper(*h, t.dst, &t.payload);
      h->length = static_cast<uint32_t>(t.payload.size());
      comm::encode_header(*h, t.header);
    }
  }
  const InFlight& m = net_->peek(i);
  Node& dst = *nodes_[m.dst];
  Result<comm::WireHeader> h = comm::decode_header(m.header, m.payload.size(), opts_.nodes, 1);
  if (h) {
    const comm::MsgTypeInfo* info = dst.comm->registry().find(h->type);
    std::string body = h->is_reply() ? fmt::format("bytes={}", m.payload.size())
                       : info != nullptr && info->printer ? info->printer(m.payload.span())
                                                          : "";
    note(fmt::format("deliver {}->{} {}{} {}", m.src, m.dst, dst.comm->registry().name_of(h->type),
                     h->is_reply() ? " reply" : "", body));
  } else {
    note(fmt::format("deliver {}->{} (bad header)", m.src, m.dst));
  }
  comm::NodeId n = net_->stage(i);
  HandlerTurn turn;
  set_coop_scheduler(&turn);
  nodes_[n]->comm->poll();
  set_coop_scheduler(nullptr);
  LOOM_CHECK(!net_->staged(n), "node {} did not take its message", n);
}

void Simulation::fire_timer(uint32_t node) {
  note(fmt::format("timer at node {}", node));
  HandlerTurn turn;
  set_coop_scheduler(&turn);
  nodes_[node]->comm->fire_timer();
  set_coop_scheduler(nullptr);
}

Simulation::Step Simulation::decide() {
  if (!failure_.is_ok()) return {Step::kEnd, 0};
  choices_.clear();
  bool all_done = true;
  for (size_t k = 0; k < threads_.size(); ++k) {
    SimThread& t = *threads_[k];
    switch (t.state) {
      case SimThread::State::kDone:
        break;
      case SimThread::State::kBlocked:
        all_done = false;
        if (t.ready()) choices_.push_back({Step::kThread, k});
        break;
      default:
        all_done = false;
        choices_.push_back({Step::kThread, k});
    }
  }
  for (size_t k = 0; k < net_->in_flight(); ++k) choices_.push_back({Step::kMessage, k});
  // A node's pending timers are one choice: its earliest fires (comm/timers.h, manual mode).
  for (size_t n = 0; n < nodes_.size(); ++n)
    if (nodes_[n]->comm->timers().pending() > 0) choices_.push_back({Step::kTimer, n});
  if (choices_.empty()) {
    if (all_done) return {Step::kEnd, 0};
    std::string blocked;
    for (auto& t : threads_)
      if (t->state == SimThread::State::kBlocked)
        blocked += fmt::format(" {} on a {};", thread_name(*t), t->what);
    fail(Status::internal(fmt::format("deadlock: nothing to deliver and{}", blocked)));
    return {Step::kEnd, 0};
  }
  if (++steps_ > opts_.max_steps) {
    fail(Status::internal(fmt::format("no end after {} steps", opts_.max_steps)));
    return {Step::kEnd, 0};
  }
  return choices_[rng_() % choices_.size()];
}

namespace {

// The simulated threads hand the turn to each other through futexes: on one CPU each hand-over
// is a direct switch, across CPUs it wakes another CPU (an input of tests/fuzz's handlers target
// took 7.8 ms on the 2-vCPU VM, 0.8 ms on one CPU). So a run keeps its thread, and the threads it
// starts (they inherit the mask), on the CPU it started on; the caller's mask comes back after.
class StayOnOneCpu {
 public:
  StayOnOneCpu() {
    if (sched_getaffinity(0, sizeof old_, &old_) != 0) return;
    cpu_set_t one;
    CPU_ZERO(&one);
    const int cpu = sched_getcpu();
    CPU_SET(cpu < 0 ? 0 : cpu, &one);
    pinned_ = sched_setaffinity(0, sizeof one, &one) == 0;
  }
  ~StayOnOneCpu() {
    if (pinned_) (void)sched_setaffinity(0, sizeof old_, &old_);
  }
  StayOnOneCpu(const StayOnOneCpu&) = delete;
  StayOnOneCpu& operator=(const StayOnOneCpu&) = delete;

 private:
  cpu_set_t old_{};
  bool pinned_ = false;
};

}  // namespace

Status Simulation::run() {
  LOOM_CHECK(!running_, "run() twice");
  running_ = true;
  StayOnOneCpu pin;
  for (Step next = decide(); next.kind != Step::kEnd;) {
    if (next.kind == Step::kMessage || next.kind == Step::kTimer) {
      if (next.kind == Step::kMessage)
        deliver(next.index);
      else
        fire_timer(static_cast<uint32_t>(next.index));
      next = decide();
      continue;
    }
    // The threads take turns among themselves until one of them hands a choice back.
    start(*threads_[next.index]);
    back_.wait();
    next = handed_;
  }
  if (!failure_.is_ok()) {
    // Threads that finished can still be joined; the parked ones stay parked (abandon()).
    for (auto& t : threads_)
      if (t->state == SimThread::State::kDone && t->os.joinable()) t->os.join();
    return Status(failure_.code(),
                  fmt::format("simulation seed {} failed at step {}: {}\nlast events:\n{}",
                              opts_.seed, steps_, failure_.message(), trace_tail()));
  }
  for (auto& t : threads_) t->os.join();
  running_ = false;
  return Status::ok();
}

// --- After the run (fuzzing) ---------------------------------------------------------------------

void Simulation::post(uint32_t src, uint32_t dst, comm::MsgType type,
                      std::span<const std::byte> payload, bool request) {
  LOOM_CHECK(!running_ && failure_.is_ok() && src < opts_.nodes && dst < opts_.nodes,
             "post() after a successful run(), between nodes of the simulation");
  comm::Comm& c = *nodes_[src]->comm;
  note(fmt::format("node {} posts {}{} to {} ({} bytes)", src, c.registry().name_of(type),
                   request ? " request" : "", dst, payload.size()));
  Status s = request ? c.start_request(dst, type, payload, [](Status, comm::Buffer) {})
                     : c.send(dst, type, payload);
  LOOM_CHECK(s.is_ok(), "posting a message: {}", s.to_string());
}

Status Simulation::settle() {
  LOOM_CHECK(!running_, "settle() during run()");
  for (auto& t : threads_)
    LOOM_CHECK(t->state == SimThread::State::kDone, "settle() with a thread still running");
  running_ = true;
  for (Step next = decide(); next.kind != Step::kEnd; next = decide()) {
    if (next.kind == Step::kMessage)
      deliver(next.index);
    else
      fire_timer(static_cast<uint32_t>(next.index));
  }
  // note: no thread is parked inside protocol code (each ended before), so nothing needs to be
  // abandoned: the destructor tears the nodes down as after a successful run.
  running_ = false;
  if (!failure_.is_ok())
    return Status(failure_.code(),
                  fmt::format("simulation seed {} failed at step {}: {}\nlast events:\n{}",
                              opts_.seed, steps_, failure_.message(), trace_tail()));
  return Status::ok();
}

comm::Comm& Simulation::comm(uint32_t node) { return *nodes_.at(node)->comm; }
protocols::hlrc::Hlrc& Simulation::hlrc(uint32_t node) { return *nodes_.at(node)->hlrc; }
sync::BarrierService& Simulation::barriers(uint32_t node) { return *nodes_.at(node)->barriers; }

// --- Thread operations
// ----------------------------------------------------------------------------

uint32_t Thread::node() const { return self_->node; }
uint32_t Thread::id() const { return self_->id; }

void Thread::yield() {
  coop_scheduler()->block_until([] { return true; }, "turn");
}

int Thread::home_of(uint64_t addr) {
  yield();
  Simulation::Node& n = *sim_->nodes_[self_->node];
  return n.heap->resolve_home(n.frames->page_of(reinterpret_cast<void*>(addr)));
}

void Thread::wait_until(std::function<bool()> ready) {
  coop_scheduler()->block_until(std::move(ready), "simulator wait");
}

void Thread::inject(uint32_t dst, comm::MsgType type, std::span<const std::byte> payload,
                    bool request) {
  yield();
  comm::Comm& c = *sim_->nodes_[self_->node]->comm;
  sim_->note(fmt::format("{} injects {}{} to {} ({} bytes)", sim_->thread_name(*self_),
                         c.registry().name_of(type), request ? " request" : "", dst,
                         payload.size()));
  Status s = request ? c.start_request(dst, type, payload, [](Status, comm::Buffer) {})
                     : c.send(dst, type, payload);
  LOOM_CHECK(s.is_ok(), "injecting a message: {}", s.to_string());
}

uint64_t Thread::page_of(uint64_t addr) const {
  return sim_->nodes_[self_->node]->frames->page_of(reinterpret_cast<void*>(addr));
}

void Thread::access(uint64_t addr, size_t len, bool is_write) {
  Simulation::Node& n = *sim_->nodes_[self_->node];
  SimFrames& f = *n.frames;
  auto* p = reinterpret_cast<std::byte*>(addr);
  if (len == 0 || !f.contains(p) || !f.contains(p + len - 1)) {
    sim_->fail(Status::invalid_argument(
        fmt::format("{}: {}-byte access at {:#x} outside the shared region",
                    sim_->thread_name(*self_), len, addr)));
    coop_scheduler()->block_until([] { return false; }, "failed access");
  }
  memory::PageId first = f.page_of(p), last = f.page_of(p + len - 1);
  // As the MMU does for an access that spans two pages: fault until both allow it at once.
  for (bool ok = false; !ok;) {
    ok = true;
    for (memory::PageId pg = first; pg <= last; ++pg) {
      if (f.allows(pg, is_write)) continue;
      ok = false;
      std::byte* at = std::max(p, f.app_page(pg));
      if (!n.platform->on_fault(at, is_write)) {
        sim_->fail(Status::invalid_argument(
            fmt::format("{}: {} of unallocated shared memory at {:#x}", sim_->thread_name(*self_),
                        is_write ? "write" : "read", reinterpret_cast<uint64_t>(at))));
        coop_scheduler()->block_until([] { return false; }, "failed access");
      }
      break;
    }
  }
  if (is_write)
    for (memory::PageId pg = first; pg <= last; ++pg) f.note_write(pg);
}

// Copies `len` bytes between `buf` and the node's frames at `addr` (to the frames if
// `to_shared`), with `access` checked first for each page piece if `check_each_page` (a bulk
// copy, page by page as memcpy faults) or not at all (the caller checked the whole range).
void Thread::copy_pages(uint64_t addr, std::byte* buf, size_t len, bool to_shared,
                        bool check_each_page) {
  SimFrames& f = *sim_->nodes_[self_->node]->frames;
  for (size_t done = 0; done < len;) {
    uint64_t a = addr + done;
    size_t off = a & (memory::kPageBytes - 1);
    size_t n = std::min(len - done, memory::kPageBytes - off);
    if (check_each_page) access(a, n, to_shared);
    std::byte* page = f.sys_page(f.page_of(reinterpret_cast<std::byte*>(a))) + off;
    if (to_shared)
      std::memcpy(page, buf + done, n);
    else
      std::memcpy(buf + done, page, n);
    done += n;
  }
}

void Thread::write_bytes(uint64_t addr, std::span<const std::byte> bytes) {
  yield();
  copy_pages(addr, const_cast<std::byte*>(bytes.data()), bytes.size(), true, true);
  sim_->note(
      fmt::format("{} write {:#x}/{} (bulk)", sim_->thread_name(*self_), addr, bytes.size()));
}

void Thread::read_bytes(uint64_t addr, std::span<std::byte> out) {
  yield();
  copy_pages(addr, out.data(), out.size(), false, true);
  sim_->note(fmt::format("{} read {:#x}/{} (bulk)", sim_->thread_name(*self_), addr, out.size()));
}

uint64_t Thread::read(uint64_t addr, size_t len) {
  LOOM_CHECK(len >= 1 && len <= 8, "read of {} bytes: 1..8", len);
  yield();
  access(addr, len, false);  // both pages at once, if it spans two
  std::byte bytes[8] = {};
  copy_pages(addr, bytes, len, false, false);
  uint64_t v;
  std::memcpy(&v, bytes, 8);
  sim_->note(fmt::format("{} read {:#x}/{} = {:#x}", sim_->thread_name(*self_), addr, len, v));
  return v;
}

void Thread::write(uint64_t addr, uint64_t value, size_t len) {
  LOOM_CHECK(len >= 1 && len <= 8, "write of {} bytes: 1..8", len);
  yield();
  access(addr, len, true);  // both pages at once, if it spans two
  std::byte bytes[8];
  std::memcpy(bytes, &value, 8);
  copy_pages(addr, bytes, len, true, false);
  sim_->note(fmt::format("{} write {:#x}/{} = {:#x}", sim_->thread_name(*self_), addr, len, value));
}

void Thread::lock(uint64_t id) {
  yield();
  sim_->note(fmt::format("{} lock {:#x}", sim_->thread_name(*self_), id));
  sim_->nodes_[self_->node]->locks->lock(id);
  sim_->note(fmt::format("{} locked {:#x}", sim_->thread_name(*self_), id));
}

void Thread::unlock(uint64_t id) {
  yield();
  sim_->note(fmt::format("{} unlock {:#x}", sim_->thread_name(*self_), id));
  sim_->nodes_[self_->node]->locks->unlock(id);
}

void Thread::barrier(uint64_t id, uint32_t count) {
  yield();
  sim_->note(fmt::format("{} barrier {:#x}", sim_->thread_name(*self_), id));
  sim_->nodes_[self_->node]->barriers->wait(id, count);
  sim_->note(fmt::format("{} passed barrier {:#x}", sim_->thread_name(*self_), id));
}

sync::ObjectRef Thread::create_object(uint32_t cls, uint32_t home,
                                      std::span<const std::byte> init) {
  yield();
  sync::ObjectRef ref = sim_->nodes_[self_->node]->objects->create(cls, home, init);
  // note: object ids come from a process-wide counter, so they are left out of the trace (the
  // same seed must give the same trace in every run of a process).
  sim_->note(fmt::format("{} created an object of class {} at node {}", sim_->thread_name(*self_),
                         cls, home));
  return ref;
}

std::vector<std::byte> Thread::call_object(const sync::ObjectRef& obj, uint32_t op,
                                           std::span<const std::byte> arg) {
  yield();
  sim_->note(fmt::format("{} calls an object of class {} at node {}: op {} ({})",
                         sim_->thread_name(*self_), obj.cls, obj.home, op,
                         sync::attr_name(sync::operation_attr(obj.cls, op))));
  std::vector<std::byte> out = sim_->nodes_[self_->node]->objects->call(obj, op, arg);
  sim_->note(fmt::format("{} answered: op {}", sim_->thread_name(*self_), op));
  return out;
}

void Thread::destroy_object(const sync::ObjectRef& obj) {
  yield();
  sim_->nodes_[self_->node]->objects->destroy(obj);
}

void Thread::cond_wait(uint64_t cond, uint64_t* generation, uint64_t lock) {
  yield();
  sim_->note(
      fmt::format("{} cond wait {:#x} gen {}", sim_->thread_name(*self_), cond, *generation));
  sim_->nodes_[self_->node]->conds->wait(cond, generation, lock);
  sim_->note(fmt::format("{} cond woken {:#x}", sim_->thread_name(*self_), cond));
}

void Thread::cond_signal(uint64_t cond, uint64_t* generation, bool all) {
  yield();
  Simulation::Node& n = *sim_->nodes_[self_->node];
  if (all)
    n.conds->broadcast(cond, generation);
  else
    n.conds->signal(cond, generation);
  sim_->note(fmt::format("{} cond {} {:#x} gen {}", sim_->thread_name(*self_),
                         all ? "broadcast" : "signal", cond, *generation));
}

void Thread::free(uint64_t addr) {
  yield();
  Status s = sim_->nodes_[self_->node]->heap->free(reinterpret_cast<void*>(addr));
  if (!s) {
    sim_->fail(Status(s.code(), fmt::format("{}: free({:#x}): {}", sim_->thread_name(*self_), addr,
                                            s.message())));
    coop_scheduler()->block_until([] { return false; }, "failed free");
  }
  sim_->note(fmt::format("{} free {:#x}", sim_->thread_name(*self_), addr));
}

uint64_t Thread::alloc(size_t bytes, memory::Placement placement, int node, const char* protocol) {
  yield();
  memory::ProtocolId pid = memory::kProtocolUnknown;
  if (protocol != nullptr) {
    pid = protocols::protocol_id(protocol);
    LOOM_CHECK(pid != memory::kProtocolUnknown, "alloc: no protocol named {}", protocol);
  }
  Result<void*> p = sim_->nodes_[self_->node]->heap->alloc(bytes, placement, node, pid);
  if (!p) {
    sim_->fail(Status(p.status().code(), fmt::format("{}: alloc({}): {}", sim_->thread_name(*self_),
                                                     bytes, p.status().message())));
    coop_scheduler()->block_until([] { return false; }, "failed alloc");
  }
  auto a = reinterpret_cast<uint64_t>(*p);
  sim_->note(fmt::format("{} alloc {} = {:#x}", sim_->thread_name(*self_), bytes, a));
  return a;
}

// --- Statistics ---------------------------------------------------------------------------------

uint64_t Simulation::messages() const { return net_->messages(); }
uint64_t Simulation::bytes() const { return net_->bytes(); }

std::vector<Simulation::TypeCount> Simulation::by_type() const {
  std::vector<TypeCount> out;
  for (comm::MsgType t = 0; t < comm::kMaxMsgTypes; ++t) {
    TypeCount c;
    for (const auto& n : nodes_) {
      comm::MessageCounters::Row r = n->comm->counters().get(t);
      c.messages += r.sent_msgs;
      c.bytes += r.sent_msgs * comm::kWireHeaderSize + r.sent_bytes;
    }
    if (c.messages == 0) continue;
    c.name = nodes_[0]->comm->registry().name_of(t);
    out.push_back(std::move(c));
  }
  return out;
}

uint64_t Simulation::cond_overtaken() const {
  uint64_t n = 0;
  for (const auto& node : nodes_) n += node->conds->overtaken();
  return n;
}

const hl::Counters& Simulation::hlrc_counters(uint32_t node) const {
  return nodes_.at(node)->hlrc->counters();
}

const sync::BarrierCounters& Simulation::barrier_counters(uint32_t node) const {
  return nodes_.at(node)->barriers->counters();
}

sync::LockCounters Simulation::lock_counters(uint32_t node) const {
  return nodes_.at(node)->locks->counters();
}

memory::Heap::Stats Simulation::heap_stats(uint32_t node) const {
  return nodes_.at(node)->heap->stats();
}

uint64_t Simulation::protect_calls(uint32_t node) const {
  return nodes_.at(node)->frames->protect_calls();
}

uint64_t Simulation::track_calls(uint32_t node) const {
  return nodes_.at(node)->frames->track_calls();
}

}  // namespace loom::sim

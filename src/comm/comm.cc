#include "comm/comm.h"

#include <fmt/format.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "base/coop.h"
#include "base/log.h"

namespace loom::comm {
namespace {

thread_local const Comm* t_dispatching = nullptr;
thread_local bool t_running_fatal_handler = false;

// Marks the calling thread as `comm`'s dispatcher for its lifetime (nests).
class DispatchScope {
 public:
  explicit DispatchScope(const Comm* comm) : prev_(t_dispatching) { t_dispatching = comm; }
  ~DispatchScope() { t_dispatching = prev_; }

 private:
  const Comm* prev_;
};

// Payload of kRegionKey: this header followed by the transport's key bytes.
struct RegionKeyMsg {
  RegionId id;
  uint32_t pad;
  uint64_t base;
  uint64_t len;
};

// Payload of an error reply: a StatusCode byte followed by the message text.
Buffer encode_error(const Status& s) {
  Buffer b(1 + s.message().size());
  b.data()[0] = static_cast<std::byte>(s.code());
  if (!s.message().empty()) std::memcpy(b.data() + 1, s.message().data(), s.message().size());
  return b;
}

Status decode_error(std::span<const std::byte> p, NodeId from) {
  if (p.empty()) return Status::internal(fmt::format("node {} failed the request", from));
  auto code = static_cast<StatusCode>(p[0]);
  if (code == StatusCode::kOk || static_cast<int>(code) > static_cast<int>(StatusCode::kInternal))
    code = StatusCode::kInternal;
  std::string msg(reinterpret_cast<const char*>(p.data() + 1), p.size() - 1);
  return {code, fmt::format("node {}: {}", from, msg)};
}

int64_t coarse_now_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

}  // namespace

CommOptions CommOptions::from_config(const Config& config, uint16_t job_tag) {
  CommOptions o;
  o.job_tag = job_tag;
  o.wait_spin_ns = config.get_int("WAIT_SPIN_US") * 1000;
  o.heartbeat_ns = config.get_int("HEARTBEAT_MS") * 1000000;
  o.peer_timeout_ns = config.get_int("PEER_TIMEOUT_MS") * 1000000;
  o.monitor_peers = static_cast<uint32_t>(config.get_int("MONITOR_PEERS"));
  o.max_inflight = static_cast<uint32_t>(config.get_int("MAX_INFLIGHT"));
  o.max_inflight_bytes = static_cast<uint64_t>(config.get_int("MAX_INFLIGHT_BYTES"));
  o.trace = config.get_bool("TRACE");
  return o;
}

Comm::Comm(Transport& transport, CommOptions options)
    : transport_(transport),
      opts_(options),
      rank_(transport.rank()),
      size_(transport.size()),
      timers_(options.manual_timers),
      last_heard_ns_(new std::atomic<int64_t>[size_]),
      dead_(new std::atomic<bool>[size_]) {
  for (uint32_t i = 0; i < size_; ++i) {
    last_heard_ns_[i] = 0;
    dead_[i] = false;
  }
  inbox_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  LOOM_CHECK(inbox_fd_ >= 0, "eventfd failed: {}", std::strerror(errno));
  register_system_types();
  transport_.set_sink(this);
}

Comm::~Comm() {
  if (inbox_fd_ >= 0) ::close(inbox_fd_);
}

void Comm::register_system_types() {
  Status s = registry_.add(
      sys_msg::kHeartbeat, "heartbeat", [](Incoming&) { return Status::ok(); },
      [](std::span<const std::byte>) { return std::string(); });
  LOOM_CHECK(s.is_ok(), "{}", s.to_string());
  s = registry_.add(
      sys_msg::kAbort, "abort",
      [this](Incoming& in) {
        // u32 culprit (kNoNode: the sender itself), then the reason as text.
        auto p = in.payload();
        if (p.size() < sizeof(NodeId)) return Status::malformed("abort: shorter than 4 bytes");
        NodeId culprit;
        std::memcpy(&culprit, p.data(), sizeof culprit);
        if (culprit >= size_) culprit = in.src();
        std::string reason(reinterpret_cast<const char*>(p.data()) + sizeof culprit,
                           p.size() - sizeof culprit);
        aborted_by_peer_.store(true, std::memory_order_release);
        report_fatal(
            Status::peer_failed(fmt::format("node {} stopped the job: {}", in.src(), reason)),
            culprit);
        return Status::ok();
      },
      [](std::span<const std::byte> p) {
        if (p.size() < sizeof(NodeId)) return hex_preview(p);
        NodeId culprit;
        std::memcpy(&culprit, p.data(), sizeof culprit);
        return fmt::format("culprit={} {}", static_cast<int64_t>(culprit == kNoNode ? -1 : culprit),
                           std::string(reinterpret_cast<const char*>(p.data()) + sizeof culprit,
                                       p.size() - sizeof culprit));
      });
  LOOM_CHECK(s.is_ok(), "{}", s.to_string());
  s = registry_.add(sys_msg::kRegionKey, "region_key", [this](Incoming& in) -> Status {
    auto p = in.payload();
    if (p.size() < sizeof(RegionKeyMsg))
      return Status::malformed(fmt::format("region key of {} bytes is too short", p.size()));
    RegionKeyMsg m;
    std::memcpy(&m, p.data(), sizeof m);
    Status st = transport_.add_remote_region(in.src(), m.id, m.base, m.len,
                                             p.subspan(sizeof(RegionKeyMsg)));
    if (!st) return st;
    {
      MutexLock lock(regions_mu_);
      region_keys_[m.id]++;
    }
    regions_cv_.notify_all();
    return Status::ok();
  });
  LOOM_CHECK(s.is_ok(), "{}", s.to_string());
}

void Comm::set_fatal_handler(std::function<void(const Status&)> fn, bool ends_process) {
  fatal_ends_process_.store(ends_process, std::memory_order_release);
  MutexLock lock(fatal_mu_);
  fatal_handler_ = std::move(fn);
}

void Comm::report_fatal(const Status& why, NodeId culprit) {
  report_fatal_as(why, culprit, /*lost_peer=*/false);
}

void Comm::report_fatal_as(const Status& why, NodeId culprit, bool lost_peer) {
  if (failed_.exchange(true, std::memory_order_acq_rel)) return;  // the first reason wins
  culprit_.store(culprit, std::memory_order_release);
  lost_a_peer_.store(lost_peer, std::memory_order_release);
  std::function<void(const Status&)> fn;
  {
    MutexLock lock(fatal_mu_);
    fn = fatal_handler_;
  }
  if (fn) {
    t_running_fatal_handler = true;  // its own sends must fail normally (hold_if_ending)
    fn(why);
    t_running_fatal_handler = false;
  } else {
    LOOM_ERROR("{}", why.to_string());
  }
}

void Comm::report_bad_input(NodeId from, MsgType type, bool reply, const Status& why) {
  report_fatal(
      Status(why.code(), fmt::format("bad '{}' {} from node {}: {}", registry_.name_of(type),
                                     reply ? "reply" : "message", from, why.to_string())),
      from);
}

void Comm::fail_job(const Status& why, NodeId culprit) {
  LOOM_CHECK(!on_dispatcher(), "fail_job on the dispatcher ({}): a handler returns its error",
             why.to_string());
  report_fatal(why, culprit);
  // The fatal handler returned: it does not end the process (the simulator), or another
  // thread's report came first and that thread is ending it.
  if (CoopScheduler* s = coop_scheduler(); s != nullptr)
    s->block_until([] { return false; }, "the end of the failed job");
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

void Comm::fail_bad_reply(NodeId from, MsgType type, const Status& why) {
  LOOM_CHECK(!on_dispatcher(), "fail_bad_reply on the dispatcher ({}): report_bad_input instead",
             why.to_string());
  report_bad_input(from, type, /*reply=*/true, why);
  fail_job(why, from);  // reported above: this only waits for the end
}

bool Comm::on_dispatcher() const { return t_dispatching == this; }

bool Comm::peer_alive(NodeId node) const {
  return node < size_ && !dead_[node].load(std::memory_order_acquire);
}

Status Comm::check_dst(NodeId dst) const {
  if (dst >= size_)
    return Status::invalid_argument(
        fmt::format("node {} does not exist (the job has {} nodes)", dst, size_));
  if (dead_[dst].load(std::memory_order_acquire))
    return Status::peer_failed(fmt::format("node {} has failed", dst));
  return Status::ok();
}

WireHeader Comm::make_header(MsgType type, uint32_t len, uint16_t flags,
                             uint64_t request_id) const {
  WireHeader h;
  h.type = type;
  h.src = rank_;
  h.length = len;
  h.flags = flags;
  h.job = opts_.job_tag;
  h.request_id = request_id;
  return h;
}

void Comm::wait_for_credit(NodeId dst, size_t bytes) {
  // why: bounding unfinished sends bounds the memory the transport holds for a slow receiver.
  // Only application threads wait; the dispatcher must stay responsive, and what it sends is
  // bounded by the protocols (a reply per request).
  if (on_dispatcher()) return;
  for (unsigned n = 0;; ++n) {
    SendBacklog q = transport_.backlog(dst);
    if ((q.msgs < int64_t{opts_.max_inflight} &&
         q.bytes + static_cast<int64_t>(bytes) <= static_cast<int64_t>(opts_.max_inflight_bytes)) ||
        q.msgs <= 0)
      return;
    if (dead_[dst].load(std::memory_order_acquire) || failed()) return;
    if (!poll_for_waiter() && n > 64) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

Status Comm::send_raw(NodeId dst, const WireHeader& h, std::span<const std::byte> payload,
                      Buffer* owned) {
  if (payload.size() > kMaxPayload)
    return Status::invalid_argument(
        fmt::format("message of {} bytes exceeds the {} byte limit", payload.size(), kMaxPayload));
  if (Status s = check_dst(dst); !s) {
    hold_if_ending(s);
    return s;
  }
  wait_for_credit(dst, payload.size());
  if (opts_.trace) trace("send to", dst, h, payload);
  std::array<std::byte, kWireHeaderSize> hb;
  encode_header(h, hb);
  size_t len = payload.size();
  Status s = owned != nullptr ? transport_.send(dst, hb, std::move(*owned))
                              : transport_.send(dst, hb, payload);
  if (!s) {
    hold_if_ending(s);
    return s;
  }
  counters_.add_sent(h.type, len);
  if (!on_dispatcher() && transport_.backlog(dst).msgs > 0) {
    // The send waits in the transport for progress. An application thread may not poll again
    // soon (it may sleep on a condition), so wake the dispatcher, which keeps polling while any
    // send is unfinished (ServerThread).
    signal_inbox_fd();
  }
  return Status::ok();
}

Status Comm::send(NodeId dst, MsgType type, std::span<const std::byte> payload) {
  return send_raw(dst, make_header(type, static_cast<uint32_t>(payload.size()), 0, 0), payload,
                  nullptr);
}

Status Comm::send(NodeId dst, MsgType type, Buffer&& payload) {
  Buffer b = std::move(payload);
  return send_raw(dst, make_header(type, static_cast<uint32_t>(b.size()), 0, 0), b.span(), &b);
}

Status Comm::start_pending(NodeId dst, MsgType type, std::span<const std::byte> payload,
                           Pending pending) {
  uint64_t id;
  // A thread waits for a Request's reply (it polls); a callback's reply is the dispatcher's.
  const uint16_t flags = pending.req != nullptr ? WireHeader::kFlagWaiter : 0;
  {
    MutexLock lock(pending_mu_);
    id = pending_.insert(std::move(pending));
  }
  Status s = send_raw(dst, make_header(type, static_cast<uint32_t>(payload.size()), flags, id),
                      payload, nullptr);
  if (!s) {
    MutexLock lock(pending_mu_);
    pending_.erase(id);
  }
  return s;
}

Status Comm::start_request(NodeId dst, MsgType type, std::span<const std::byte> payload,
                           Request* req) {
  return start_pending(dst, type, payload, Pending{dst, req, {}});
}

Status Comm::start_request(NodeId dst, MsgType type, std::span<const std::byte> payload,
                           std::function<void(Status, Buffer)> on_reply) {
  return start_pending(dst, type, payload, Pending{dst, nullptr, std::move(on_reply)});
}

uint64_t Comm::expect_reply(NodeId from, Request* req) {
  LOOM_CHECK(from < size_, "expect_reply from node {} (the job has {} nodes)", from, size_);
  uint64_t id;
  {
    MutexLock lock(pending_mu_);
    id = pending_.insert(Pending{from, req, {}});
  }
  // note: after the insert, so a failure reported meanwhile (fail_pending_to) either finds the
  // entry or is seen here.
  if (Status s = check_dst(from); !s && cancel(id)) req->done.complete(std::move(s));
  return id;
}

bool Comm::cancel(uint64_t id) {
  MutexLock lock(pending_mu_);
  return pending_.erase(id);
}

Result<Buffer> Comm::call(NodeId dst, MsgType type, std::span<const std::byte> payload) {
  LOOM_CHECK(!on_dispatcher(), "Comm::call({}) on the dispatcher would block a handler",
             registry_.name_of(type));
  Request req;
  if (Status s = start_request(dst, type, payload, &req); !s) return s;
  const Status& st = wait(req.done);
  if (!st) return st;
  return std::move(req.reply);
}

namespace {
uint16_t reply_flags(const ReplyTo& to, uint16_t more) {
  return WireHeader::kFlagReply | (to.waiter ? WireHeader::kFlagWaiter : 0) | more;
}
}  // namespace

Status Comm::reply(const ReplyTo& to, std::span<const std::byte> payload) {
  if (!to.valid()) return Status::invalid_argument("reply to a message that is not a request");
  return send_raw(to.node,
                  make_header(to.type, static_cast<uint32_t>(payload.size()), reply_flags(to, 0),
                              to.request_id),
                  payload, nullptr);
}

Status Comm::reply(const ReplyTo& to, Buffer&& payload) {
  if (!to.valid()) return Status::invalid_argument("reply to a message that is not a request");
  Buffer b = std::move(payload);
  return send_raw(
      to.node,
      make_header(to.type, static_cast<uint32_t>(b.size()), reply_flags(to, 0), to.request_id),
      b.span(), &b);
}

Status Comm::reply_error(const ReplyTo& to, const Status& error) {
  if (!to.valid()) return Status::invalid_argument("reply to a message that is not a request");
  Buffer b = encode_error(error);
  return send_raw(to.node,
                  make_header(to.type, static_cast<uint32_t>(b.size()),
                              reply_flags(to, WireHeader::kFlagError), to.request_id),
                  b.span(), &b);
}

const Status& Comm::wait(Completion& c) {
  LOOM_CHECK(!on_dispatcher(), "a handler tried to wait on a completion");
  return c.wait(this, opts_.wait_spin_ns);
}

Status Comm::wait_for(Completion& c, int64_t timeout_ns) {
  LOOM_CHECK(!on_dispatcher(), "a handler tried to wait on a completion");
  return c.wait_for(this, opts_.wait_spin_ns, timeout_ns);
}

// --- Arrivals ------------------------------------------------------------------------------

void Comm::on_arrival(Arrival& a) {
  // why: once the job has failed and the fatal handler ends the process, no handler needs to run
  // any more, and one that did could trip over the failure (a send to the dead node) while the
  // fatal handler progresses the network to get its abort messages out.
  if (failed() && fatal_ends_process_.load(std::memory_order_acquire)) return;
  Result<WireHeader> hr = decode_header(a.header, a.payload.size(), size_, opts_.job_tag);
  if (!hr) {
    if (hr.status().code() == StatusCode::kRefused) {
      LOOM_WARN("refused a message: {}", hr.status().message());
      return;
    }
    report_fatal(Status::malformed(fmt::format("malformed message: {}", hr.status().message())));
    return;
  }
  const WireHeader& h = *hr;
  last_heard_ns_[h.src].store(coarse_now_ns(), std::memory_order_relaxed);
  counters_.add_received(h.type, a.payload.size());
  if (opts_.trace) trace("recv from", h.src, h, a.payload);
  if (h.is_reply()) {
    complete_reply(h, a.payload, a.owned);
  } else if (on_dispatcher()) {
    dispatch(h, a.payload, a.owned);
  } else {
    enqueue(h, a.payload, a.owned);
  }
}

void Comm::complete_reply(const WireHeader& h, std::span<const std::byte> payload, Buffer* owned) {
  Pending p;
  bool defer = false;
  Status bad_reply;
  {
    MutexLock lock(pending_mu_);
    Pending* it = pending_.find(h.request_id);
    if (it == nullptr && pending_.dropped(h.request_id)) {
      LOOM_DEBUG("dropped a late reply ({}) from node {} to cancelled request {}",
                 registry_.name_of(h.type), h.src, h.request_id);
      return;
    }
    if (it == nullptr) {
      // note: each request has one reply; one to an id answered before or never issued would
      // leave nobody waiting for it, and the requester it was meant for waiting forever.
      bad_reply = Status::malformed(
          fmt::format("node {} answered request {} ({}), which is not pending here (answered "
                      "before, or never made)",
                      h.src, h.request_id, registry_.name_of(h.type)));
    } else if (it->dst != h.src) {
      bad_reply = Status::malformed(
          fmt::format("node {} answered request {} that was sent to node {} (type {})", h.src,
                      h.request_id, it->dst, registry_.name_of(h.type)));
    }
    defer = bad_reply.is_ok() && it->callback && !on_dispatcher();
    if (!defer && bad_reply.is_ok()) {
      p = pending_.take(h.request_id);
    }
  }
  if (!bad_reply.is_ok()) {
    report_fatal(bad_reply, h.src);  // outside pending_mu_: the handler may do anything
    return;
  }
  if (defer) {
    // Callbacks run on the dispatcher: leave the entry and hand the reply to the inbox.
    enqueue(h, payload, owned);
    return;
  }
  Status st = h.is_error() ? decode_error(payload, h.src) : Status::ok();
  if (p.req != nullptr) {
    if (st) p.req->reply = owned != nullptr ? std::move(*owned) : Buffer::copy_of(payload);
    p.req->done.complete(std::move(st));
  } else if (p.callback) {
    p.callback(std::move(st), owned != nullptr ? std::move(*owned) : Buffer::copy_of(payload));
  }
}

void Comm::dispatch(const WireHeader& h, std::span<const std::byte> payload, Buffer* owned) {
  const MsgTypeInfo* info = registry_.find(h.type);
  if (info == nullptr || !info->handler) {
    report_fatal(
        Status::malformed(fmt::format("node {} sent a message of unknown type {} ({} bytes)", h.src,
                                      h.type, payload.size())),
        h.src);
    return;
  }
  Incoming in(h, payload, owned);
  Status s = info->handler(in);
  // The handler's code is kept (a malformed payload, or a peer that failed the job's rules),
  // and the sender is the culprit.
  if (!s) report_bad_input(h.src, h.type, /*reply=*/false, s);
}

void Comm::enqueue(const WireHeader& h, std::span<const std::byte> payload, Buffer* owned) {
  bool was_empty;
  {
    MutexLock lock(inbox_mu_);
    was_empty = inbox_.empty();
    inbox_.push_back(Queued{h, owned != nullptr ? std::move(*owned) : Buffer::copy_of(payload)});
    inbox_nonempty_.store(true, std::memory_order_release);
  }
  // No lost wake-up: the dispatcher says asleep before its last inbox check, under inbox_mu_.
  // If that check came after our push, it sees the message; if before, its store happens
  // before this load (through the mutex), and we see it asleep.
  if (was_empty && !dispatcher_awake_.load(std::memory_order_acquire)) signal_inbox_fd();
}

void Comm::signal_inbox_fd() {
  inbox_fd_signalled_.store(true, std::memory_order_relaxed);
  uint64_t one = 1;
  ssize_t n = ::write(inbox_fd_, &one, sizeof one);
  (void)n;  // the counter cannot overflow here; a failed wake only delays to the next tick
}

void Comm::set_dispatcher_awake(bool awake) {
  dispatcher_awake_.store(awake, std::memory_order_release);
}

bool Comm::inbox_empty() const {
  MutexLock lock(inbox_mu_);
  return inbox_.empty();
}

void Comm::reset_wakeup() {
  inbox_fd_signalled_.store(false, std::memory_order_relaxed);
  uint64_t v;
  ssize_t n = ::read(inbox_fd_, &v, sizeof v);
  (void)n;  // EAGAIN: already reset
}

size_t Comm::drain_inbox() {
  // note: a push made after this load is seen by the dispatcher's next poll, or, if it is about
  // to sleep, by its last inbox_empty() check (under the mutex) or the eventfd.
  if (!inbox_nonempty_.load(std::memory_order_acquire)) return 0;
  if (failed() && fatal_ends_process_.load(std::memory_order_acquire)) return 0;  // see on_arrival
  std::vector<Queued> batch;
  {
    MutexLock lock(inbox_mu_);
    if (inbox_.empty()) return 0;
    batch.swap(inbox_);
    inbox_nonempty_.store(false, std::memory_order_relaxed);
  }
  if (inbox_fd_signalled_.load(std::memory_order_relaxed)) reset_wakeup();
  for (Queued& q : batch) {
    if (q.header.is_reply()) {
      complete_reply(q.header, q.payload.span(), &q.payload);
    } else {
      dispatch(q.header, q.payload.span(), &q.payload);
    }
  }
  return batch.size();
}

void Comm::hold_if_ending(const Status& s) const {
  if (s.code() != StatusCode::kPeerFailed || t_running_fatal_handler ||
      !fatal_ends_process_.load(std::memory_order_acquire) ||
      shutting_down_.load(std::memory_order_acquire))
    return;
  // A peer failed outside the shutdown: the fatal handler is ending this process (on_peer_failure
  // calls it), so this application thread waits for that instead of seeing a half-failed job.
  if (on_dispatcher()) {
    // The dispatcher waits too once the job has failed: a handler that finds its send failing
    // would otherwise abort the process with a check of its own while the fatal handler, on
    // another thread, tells the others what failed (seen under mpirun: a lock grant to the
    // SIGSTOPped node); the fatal handler never needs the dispatcher. But the report may have
    // to come through the dispatcher itself (the transport's error callback), so it waits only
    // a moment for it, and else lets the handler see the error.
    for (int i = 0; i < 100 && !failed(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!failed()) return;
  }
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

void Comm::on_peer_failure(NodeId node, const Status& why) {
  if (node >= size_) return;
  if (dead_[node].exchange(true, std::memory_order_acq_rel)) return;
  if (shutting_down_.load(std::memory_order_acquire)) {
    // Every node has passed the shutdown barrier: connections closing now are expected.
    LOOM_DEBUG("ignored during shutdown: {}", why.to_string());
    fail_pending_to(node, why);
    return;
  }
  // note: the fatal handler first. The runtime's handler ends the process, so waiting threads
  // never see a half-failed job; handlers that return (tests) then get their requests failed.
  // The job may already be stopping for another reason (the launcher said this node died, and
  // the handler runs on another thread): report_fatal returns at once then, and with a handler
  // that ends the process the requests must not fail either (measured: a kill -9 test's
  // program printed its call's failure before the process ended).
  report_fatal_as(why, node, /*lost_peer=*/true);
  if (fatal_ends_process_.load(std::memory_order_acquire)) return;
  fail_pending_to(node, why);
}

void Comm::fail_pending_to(NodeId node, const Status& why) {
  std::vector<Pending> failed;
  {
    MutexLock lock(pending_mu_);
    pending_.take_if([node](const Pending& p) { return p.dst == node; }, &failed);
  }
  for (Pending& p : failed) {
    if (p.req != nullptr)
      p.req->done.complete(why);
    else if (p.callback)
      p.callback(why, Buffer());
  }
}

// --- Progress ------------------------------------------------------------------------------

bool Comm::poll(int64_t now) {
  MutexLock role(dispatch_mu_);
  DispatchScope scope(this);
  // note: the inbox first: what a waiting thread queued came before what progress() finds now.
  bool did = drain_inbox() > 0;
  did |= transport_.progress();
  did |= drain_inbox() > 0;
  did |= now < 0 ? timers_.run_due() : timers_.run_due_at(now);
  return did;
}

bool Comm::fire_timer() {
  MutexLock role(dispatch_mu_);
  DispatchScope scope(this);
  return timers_.fire_next();
}

bool Comm::poll_for_waiter() {
  bool did = transport_.try_progress();
  // why: a thread holding a Loom Mutex could need it again in a handler. A handler run here
  // faults on shared memory as little as on the server thread: the fault handler refuses a
  // fault while the role (a Mutex) is held.
  if (t_mutexes_held == 0 && !on_dispatcher() && inbox_nonempty_.load(std::memory_order_acquire) &&
      dispatch_mu_.try_lock()) {
    {
      DispatchScope scope(this);
      if (size_t n = drain_inbox(); n > 0) {
        handled_by_waiters_.fetch_add(n, std::memory_order_relaxed);
        did = true;
      }
    }
    dispatch_mu_.unlock();
  }
  return did;
}

void Comm::start_monitoring() {
  int64_t now = coarse_now_ns();
  for (uint32_t i = 0; i < size_; ++i) last_heard_ns_[i].store(now, std::memory_order_relaxed);
  monitoring_.store(true, std::memory_order_release);
  heartbeating_.store(true, std::memory_order_release);
}

void Comm::stop_monitoring() { monitoring_.store(false, std::memory_order_release); }

void Comm::begin_shutdown() {
  stop_monitoring();
  shutting_down_.store(true, std::memory_order_release);
}

std::vector<NodeId> Comm::heartbeat_targets() const {
  std::vector<NodeId> out;
  uint32_t k = std::min<uint32_t>(opts_.monitor_peers, size_ - 1);
  for (uint32_t i = 1; i <= k; ++i) out.push_back((rank_ + i) % size_);
  return out;
}

std::vector<NodeId> Comm::monitored_peers() const {
  std::vector<NodeId> out;
  uint32_t k = std::min<uint32_t>(opts_.monitor_peers, size_ - 1);
  for (uint32_t i = 1; i <= k; ++i) out.push_back((rank_ + size_ - i) % size_);
  return out;
}

void Comm::tick(int64_t now) {
  (void)now;  // TODO(simulator): take time from the caller instead of the coarse clock
  DispatchScope scope(this);  // the dispatcher's sends never wait for flow control
  if (!heartbeating_.load(std::memory_order_acquire) || failed()) return;
  // why: the coarse clock is what on_arrival stamps with; comparing like with like.
  int64_t t = coarse_now_ns();
  // note: heartbeats go on after begin_shutdown (until the server thread stops): a node that
  // reaches its begin_shutdown late (descheduled, or slow between the shutdown barriers) still
  // watches its peers, and must not find them silent.
  if (t - last_heartbeat_ns_ >= opts_.heartbeat_ns) {
    last_heartbeat_ns_ = t;
    for (NodeId p : heartbeat_targets()) {
      if (!peer_alive(p)) continue;
      Status s = send(p, sys_msg::kHeartbeat, std::span<const std::byte>());
      if (!s) LOOM_DEBUG("heartbeat to node {} failed: {}", p, s.to_string());
    }
  }
  if (!monitoring_.load(std::memory_order_acquire)) return;
  for (NodeId p : monitored_peers()) {
    int64_t silent = t - last_heard_ns_[p].load(std::memory_order_relaxed);
    if (silent > opts_.peer_timeout_ns && peer_alive(p)) {
      on_peer_failure(p, Status::peer_failed(fmt::format(
                             "node {} has not been heard from for {} ms (stopped or unreachable)",
                             p, silent / 1000000)));
      return;
    }
  }
}

// --- One-sided -----------------------------------------------------------------------------

Status Comm::register_region(RegionId id, void* base, size_t len) {
  LOOM_CHECK(!on_dispatcher(), "register_region is collective and waits; not from a handler");
  Result<std::string> key = transport_.map_region(id, base, len);
  if (!key) return key.status();
  if (Status s = transport_.add_remote_region(
          rank_, id, reinterpret_cast<uint64_t>(base), len,
          std::as_bytes(std::span<const char>(key->data(), key->size())));
      !s)
    return s;
  Buffer msg(sizeof(RegionKeyMsg) + key->size());
  RegionKeyMsg m{id, 0, reinterpret_cast<uint64_t>(base), len};
  std::memcpy(msg.data(), &m, sizeof m);
  std::memcpy(msg.data() + sizeof m, key->data(), key->size());
  for (NodeId p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    if (Status s = send(p, sys_msg::kRegionKey, msg.span()); !s) return s;
  }
  MutexLock lock(regions_mu_);
  while (region_keys_[id] < size_ - 1) {
    if (failed()) return Status::peer_failed("the job failed while exchanging region keys");
    regions_cv_.wait_for(regions_mu_, std::chrono::milliseconds(10));
  }
  return Status::ok();
}

Status Comm::put(NodeId peer, RegionId id, uint64_t offset, const void* src, size_t len,
                 Completion* done) {
  if (Status s = check_dst(peer); !s) return s;
  return transport_.put(peer, id, offset, src, len, done);
}

Status Comm::get(NodeId peer, RegionId id, uint64_t offset, void* dst, size_t len,
                 Completion* done) {
  if (Status s = check_dst(peer); !s) return s;
  return transport_.get(peer, id, offset, dst, len, done);
}

void Comm::trace(const char* dir, NodeId peer, const WireHeader& h,
                 std::span<const std::byte> payload) const {
  const MsgTypeInfo* info = registry_.find(h.type);
  std::string body = info != nullptr ? info->printer(payload) : hex_preview(payload);
  std::string req = h.request_id != 0 ? fmt::format(" #{}", h.request_id) : std::string();
  log::write_tagged("trace", fmt::format("{} {}: {}{}{} {}", dir, peer, registry_.name_of(h.type),
                                         h.is_reply() ? " reply" : "", req, body));
}

}  // namespace loom::comm

#include "comm/ucx_transport.h"

#include <fmt/format.h>
#include <sys/epoll.h>
#include <ucs/debug/log_def.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "base/log.h"
#include "base/thread_annotations.h"
#include "comm/completion.h"

namespace loom::comm {
namespace {

constexpr unsigned kAmId = 0;  // every Loom message; Loom's header carries the type

thread_local const UcxTransport* t_worker_holder = nullptr;
thread_local const UcxTransport* t_wait_holder = nullptr;  // inside the waiter lane's progress

// Whether a message with this header goes to the waiter lane: a reply a thread waits for.
bool for_waiter_lane(std::span<const std::byte, kWireHeaderSize> header) {
  uint16_t flags;
  std::memcpy(&flags, header.data() + offsetof(WireHeader, flags), sizeof flags);
  constexpr uint16_t kBoth = WireHeader::kFlagReply | WireHeader::kFlagWaiter;
  return (flags & kBoth) == kBoth;
}

// UCX's own complaints while this node creates its endpoints (UcxTransport::connect). When a
// peer dies during start-up, attaching its shared memory fails and UCX prints an ERROR line of
// its own (`shmat(...) failed`, `open(/proc/PID/fd/N) failed`) before Loom knows which node
// failed; the launcher's word names the node instead. So they are captured: put into the error if
// the connection fails, logged at info level if UCX connected anyway (it used another way).
class UcxComplaints {
 public:
  UcxComplaints() {
    static std::once_flag once;
    std::call_once(once, [] { ucs_log_push_handler(&UcxComplaints::handler); });
    MutexLock l(mu_);
    lines_.clear();
    capturing_.store(true, std::memory_order_release);
  }
  ~UcxComplaints() { capturing_.store(false, std::memory_order_release); }

  std::vector<std::string> take() {
    MutexLock l(mu_);
    return std::move(lines_);
  }

 private:
  static ucs_log_func_rc_t handler(const char* file, unsigned line, const char* /*function*/,
                                   ucs_log_level_t level,
                                   const ucs_log_component_config_t* /*comp_conf*/,
                                   const char* message, va_list ap) {
    if (!capturing_.load(std::memory_order_acquire) || level > UCS_LOG_LEVEL_WARN)
      return UCS_LOG_FUNC_RC_CONTINUE;
    char text[512];
    va_list copy;
    va_copy(copy, ap);
    std::vsnprintf(text, sizeof text, message, copy);
    va_end(copy);
    const char* base = std::strrchr(file, '/');
    MutexLock l(mu_);
    lines_.push_back(fmt::format("{}:{} {}", base != nullptr ? base + 1 : file, line, text));
    return UCS_LOG_FUNC_RC_STOP;
  }

  static inline std::atomic<bool> capturing_{false};
  static inline Mutex mu_;
  static inline std::vector<std::string> lines_ GUARDED_BY(mu_);
};

// A node's address on the wire: u32 length of the main worker's address, that address, then the
// waiter worker's.
std::string join_addresses(const std::string& main, const std::string& waiter) {
  uint32_t len = static_cast<uint32_t>(main.size());
  std::string out(reinterpret_cast<const char*>(&len), sizeof len);
  return out + main + waiter;
}

bool split_address(const std::string& joined, std::string* main, std::string* waiter) {
  uint32_t len;
  if (joined.size() < sizeof len) return false;
  std::memcpy(&len, joined.data(), sizeof len);
  if (len == 0 || len >= joined.size() - sizeof len) return false;
  *main = joined.substr(sizeof len, len);
  *waiter = joined.substr(sizeof len + len);
  return true;
}

// Starts closing `ep` without flushing: the request to wait for, or nullptr if there is none
// (closed at once, or failed: either way the endpoint is gone).
ucs_status_ptr_t close_forced(ucp_ep_h ep) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  p.flags = UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
  return r != nullptr && !UCS_PTR_IS_ERR(r) ? r : nullptr;
}

std::string ucx_error(std::string_view what, ucs_status_t st) {
  return fmt::format("{}: {}", what, ucs_status_string(st));
}

}  // namespace

// Holds worker_mu_ unless this thread already does (a handler sending from inside progress()).
class SCOPED_CAPABILITY UcxTransport::WorkerLock {
 public:
  explicit WorkerLock(UcxTransport* t) ACQUIRE(t->worker_mu_) NO_THREAD_SAFETY_ANALYSIS : t_(t) {
    if (t_worker_holder == t_) return;
    if (!t_->worker_mu_.try_lock()) {
      // Announce the wait: the server thread's polling loop then leaves the lock alone until we
      // have had it (it would otherwise take it back before this thread wakes up, again and
      // again, while it spins for messages).
      t_->lock_waiters_.fetch_add(1, std::memory_order_relaxed);
      t_->worker_mu_.lock();
      t_->lock_waiters_.fetch_sub(1, std::memory_order_relaxed);
    }
    owned_ = true;
    t_worker_holder = t_;
  }
  ~WorkerLock() RELEASE() NO_THREAD_SAFETY_ANALYSIS {
    if (!owned_) return;
    t_worker_holder = nullptr;
    t_->worker_mu_.unlock();
  }

 private:
  UcxTransport* t_;
  bool owned_ = false;
};

struct UcxTransport::Peer {
  UcxTransport* self = nullptr;
  NodeId node = 0;
  ucp_ep_h ep = nullptr;       // to the peer's main worker
  ucp_ep_h wait_ep = nullptr;  // to the peer's waiter worker (replies its threads wait for)
  // On our waiter worker, to the peer's: never used to send. UCX polls and arms only the
  // interfaces some endpoint of the worker uses (adaptive progress), and the waiter worker has no
  // other: without it, a reply could sit unseen by an armed waiter worker.
  ucp_ep_h activation_ep = nullptr;
  std::atomic<bool> dead{false};
  std::atomic<int64_t> backlog_msgs{0};  // sends UCX still holds
  std::atomic<int64_t> backlog_bytes{0};
  // Per endpoint (ep, wait_ep): the smallest payload a forced-immediate send refused although a
  // plain send of it then went out at once. UCP completes only its short protocol that way, so
  // send() skips the attempt from this size on. Under worker_mu_.
  size_t imm_limit[2] = {SIZE_MAX, SIZE_MAX};
};

SendBacklog UcxTransport::backlog(NodeId dst) const {
  // note: peers_ is fixed after connect(); reading the counters needs no lock.
  const auto& peers = const_cast<UcxTransport*>(this)->peers_unlocked();
  if (dst >= peers.size()) return {};
  return {peers[dst]->backlog_msgs.load(std::memory_order_relaxed),
          peers[dst]->backlog_bytes.load(std::memory_order_relaxed)};
}

bool UcxTransport::any_backlog() const {
  if (open_receives_.load(std::memory_order_relaxed) > 0) return true;
  return Transport::any_backlog();
}

struct UcxTransport::SendRecord {
  UcxTransport* self;
  NodeId dst;
  std::array<std::byte, kWireHeaderSize> header;
  Buffer payload;
};

struct UcxTransport::RecvRecord {
  UcxTransport* self;
  std::array<std::byte, kWireHeaderSize> header;
  Buffer payload;
};

Result<std::unique_ptr<UcxTransport>> UcxTransport::create(const Options& options) {
  std::unique_ptr<UcxTransport> t(new UcxTransport());
  t->opts_ = options;
  // why: UCX's shared-memory transports report peer failures only with their error handling
  // enabled (off by default in UCX 1.13), and their keepalive checks the peer process every
  // KEEPALIVE_INTERVAL (20 s by default). Users can still override both in the environment.
  if (options.err_handling) {
    const char* env_tls = getenv("UCX_TLS");
    std::string tls = !options.tls.empty() ? options.tls : env_tls != nullptr ? env_tls : "all";
    bool shm = tls == "all" || tls.find("shm") != std::string::npos ||
               tls.find("posix") != std::string::npos || tls.find("sysv") != std::string::npos;
    if (shm) {  // (UCX warns about variables of transports it does not load)
      setenv("UCX_POSIX_ERROR_HANDLING", "y", 0);
      setenv("UCX_SYSV_ERROR_HANDLING", "y", 0);
    }
    setenv("UCX_KEEPALIVE_INTERVAL", "1s", 0);
  }
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return Status::io(ucx_error("ucp_config_read", st));
  auto config_guard =
      std::unique_ptr<ucp_config_t, void (*)(ucp_config_t*)>(config, ucp_config_release);
  if (!options.tls.empty()) {
    st = ucp_config_modify(config, "TLS", options.tls.c_str());
    if (st != UCS_OK)
      return Status::invalid_argument(
          fmt::format("LOOM_TRANSPORTS='{}': {}", options.tls, ucs_status_string(st)));
  }
  if (getenv("UCX_RNDV_THRESH") == nullptr) {
    // why: above UCX's default threshold (8 KiB on shared memory) a message goes by rendezvous,
    // which on one host emulates its get with messages that the *sender's* progress engine must
    // answer, and registers the send buffer. Loom's larger messages (barrier releases carrying
    // pushed pages, diff batches) are sent by threads that then go on computing, so the
    // receiver would wait for the sender's server thread to wake up. Eager sends up to 128 KiB
    // complete without the sender (measured: a 16 KiB barrier release 112 -> 4 us to send).
    st = ucp_config_modify(config, "RNDV_THRESH", "131072");
    if (st != UCS_OK) return Status::io(ucx_error("setting RNDV_THRESH", st));
  }
  if (!options.net_devices.empty()) {
    st = ucp_config_modify(config, "NET_DEVICES", options.net_devices.c_str());
    if (st != UCS_OK)
      return Status::invalid_argument(
          fmt::format("LOOM_NET_DEVICES='{}': {}", options.net_devices, ucs_status_string(st)));
  }

  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
  // why: the two workers below are driven by different threads at once (the main worker by the
  // server thread, the waiter worker by application threads waiting for replies): ucp.h's own
  // example of a context that must be thread-safe.
  params.mt_workers_shared = 1;
  st = ucp_init(&params, config, &t->context_);
  if (st != UCS_OK) {
    // why: with the transports or devices restricted, "no device" means the setting asks for
    // something this machine does not have: bad configuration, which the user can fix.
    if (st == UCS_ERR_NO_DEVICE && (!options.tls.empty() || !options.net_devices.empty())) {
      const bool tls = !options.tls.empty();
      return Status::invalid_argument(fmt::format(
          "{}: UCX cannot use {} on this machine ({}ucp_init: {}; `ucx_info -d` lists what it "
          "has)",
          tls ? fmt::format("LOOM_TRANSPORTS='{}'", options.tls)
              : fmt::format("LOOM_NET_DEVICES='{}'", options.net_devices),
          tls ? "these transports" : "these devices",
          tls && !options.net_devices.empty()
              ? fmt::format("with LOOM_NET_DEVICES='{}'; ", options.net_devices)
              : "",
          ucs_status_string(st)));
    }
    return Status::io(ucx_error("ucp_init", st));
  }

  // Both workers: created serialized (worker_mu_, wait_mu_), each with its wakeup descriptor and
  // the active-message handler, told which worker received (for rendezvous receives).
  std::string addresses[2];
  ucp_worker_h* workers[2] = {&t->worker_, &t->wait_worker_};
  int* efds[2] = {&t->efd_, &t->wait_efd_};
  Lane* lanes[2] = {&t->main_lane_, &t->wait_lane_};
  for (int k = 0; k < 2; ++k) {
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
    st = ucp_worker_create(t->context_, &wp, workers[k]);
    if (st != UCS_OK) return Status::io(ucx_error("ucp_worker_create", st));
    st = ucp_worker_get_efd(*workers[k], efds[k]);
    if (st != UCS_OK) return Status::io(ucx_error("ucp_worker_get_efd", st));
    ucp_address_t* addr = nullptr;
    size_t addr_len = 0;
    st = ucp_worker_get_address(*workers[k], &addr, &addr_len);
    if (st != UCS_OK) return Status::io(ucx_error("ucp_worker_get_address", st));
    addresses[k].assign(reinterpret_cast<const char*>(addr), addr_len);
    ucp_worker_release_address(*workers[k], addr);
    lanes[k]->worker = *workers[k];
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                    UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = kAmId;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    hp.cb = &UcxTransport::am_callback;
    hp.arg = lanes[k];
    st = ucp_worker_set_am_recv_handler(*workers[k], &hp);
    if (st != UCS_OK) return Status::io(ucx_error("ucp_worker_set_am_recv_handler", st));
  }
  t->address_ = join_addresses(addresses[0], addresses[1]);
  // The waiter worker's descriptor joins the set only while a thread sleeps waiting for a reply
  // (begin_waiter_sleep): otherwise nothing drains it, and it would keep the set readable.
  t->epfd_ = epoll_create1(EPOLL_CLOEXEC);
  if (t->epfd_ < 0) return Status::io(fmt::format("epoll_create1: {}", std::strerror(errno)));
  struct epoll_event ev {};
  ev.events = EPOLLIN;
  ev.data.fd = t->efd_;
  if (epoll_ctl(t->epfd_, EPOLL_CTL_ADD, t->efd_, &ev) != 0)
    return Status::io(fmt::format("epoll_ctl: {}", std::strerror(errno)));
  return t;
}

UcxTransport::~UcxTransport() {
  close(1000);
  if (context_ == nullptr) return;
  {
    MutexLock lock(worker_mu_);
    for (auto& [id, memh] : local_regions_) ucp_mem_unmap(context_, memh);
    local_regions_.clear();
  }
  if (wait_worker_ != nullptr) ucp_worker_destroy(wait_worker_);
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (context_ != nullptr) ucp_cleanup(context_);
  if (epfd_ >= 0) ::close(epfd_);
}

Status UcxTransport::connect(NodeId rank, const std::vector<std::string>& addresses) {
  UcxComplaints complaints;
  Status s = connect_peers(rank, addresses);
  std::vector<std::string> said = complaints.take();
  if (said.empty()) return s;
  if (!s) return Status(s.code(), fmt::format("{} (UCX: {})", s.message(), fmt::join(said, "; ")));
  for (const std::string& line : said) LOOM_INFO("UCX while connecting: {}", line);
  return s;
}

Status UcxTransport::connect_peers(NodeId rank, const std::vector<std::string>& addresses) {
  // note: the waiter worker's lock first (the lock order), for its activation endpoints.
  MutexLock wait_lock(wait_mu_);
  WorkerLock lock(this);
  LOOM_CHECK(peers_.empty(), "UcxTransport::connect called twice");
  rank_ = rank;
  size_ = static_cast<uint32_t>(addresses.size());
  for (NodeId i = 0; i < size_; ++i) {
    auto peer = std::make_unique<Peer>();
    peer->self = this;
    peer->node = i;
    std::string remote[2];
    if (!split_address(addresses[i], &remote[0], &remote[1]))
      return Status::malformed(
          fmt::format("node {}'s address ({} bytes) does not parse", i, addresses[i].size()));
    Peer* errors_to = opts_.err_handling ? peer.get() : nullptr;
    if (Status s = create_endpoint(worker_, i, remote[0], errors_to, &peer->ep); !s) return s;
    if (Status s = create_endpoint(worker_, i, remote[1], errors_to, &peer->wait_ep); !s) return s;
    // note: never sends, so it needs no error handling.
    if (Status s = create_endpoint(wait_worker_, i, remote[1], nullptr, &peer->activation_ep); !s)
      return s;
    peers_.push_back(std::move(peer));
  }
  return Status::ok();
}

Status UcxTransport::create_endpoint(ucp_worker_h worker, NodeId node, const std::string& address,
                                     Peer* errors_to, ucp_ep_h* ep) {
  ucp_ep_params_t p{};
  p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  p.address = reinterpret_cast<const ucp_address_t*>(address.data());
  p.err_mode = UCP_ERR_HANDLING_MODE_NONE;
  if (errors_to != nullptr) {
    p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    p.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.err_handler.cb = &UcxTransport::ep_error;
    p.err_handler.arg = errors_to;
  }
  ucs_status_t st = ucp_ep_create(worker, &p, ep);
  if (st != UCS_OK)
    return Status::peer_failed(
        fmt::format("cannot create an endpoint to node {}: {}", node, ucs_status_string(st)));
  return Status::ok();
}

std::string UcxTransport::describe_endpoint(NodeId peer) {
  WorkerLock lock(this);
  if (peer >= peers_.size()) return "no such peer";
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  if (f == nullptr) return "?";
  ucp_ep_print_info(peers_[peer]->ep, f);
  fclose(f);
  std::string s(buf, len);
  free(buf);
  return s;
}

// --- Sending -------------------------------------------------------------------------------

Status UcxTransport::send(NodeId dst, std::span<const std::byte, kWireHeaderSize> header,
                          std::span<const std::byte> payload) {
  WorkerLock lock(this);
  if (dst >= peers_.size() || peers_[dst]->dead.load(std::memory_order_acquire))
    return Status::peer_failed(fmt::format("no connection to node {}", dst));
  Peer& peer = *peers_[dst];
  const bool waiter_lane = for_waiter_lane(header);
  size_t& imm_limit = peer.imm_limit[waiter_lane ? 1 : 0];
  const bool tried = payload.size() < imm_limit;
  if (tried) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL;
    ucp_ep_h ep = waiter_lane ? peer.wait_ep : peer.ep;
    ucs_status_ptr_t r = ucp_am_send_nbx(ep, kAmId, header.data(), kWireHeaderSize, payload.data(),
                                         payload.size(), &p);
    if (r == nullptr) return Status::ok();
    LOOM_CHECK(UCS_PTR_IS_ERR(r), "UCX returned a request for a forced-immediate send to node {}",
               dst);
    if (UCS_PTR_STATUS(r) != UCS_ERR_NO_RESOURCE)
      return Status::peer_failed(ucx_error(fmt::format("send to node {}", dst), UCS_PTR_STATUS(r)));
  }
  // Could not go out at once (or too large to try): copy and send from the copy.
  auto rec = std::make_unique<SendRecord>(SendRecord{this, dst, {}, Buffer::copy_of(payload)});
  std::memcpy(rec->header.data(), header.data(), kWireHeaderSize);
  const size_t size = payload.size();
  bool at_once = false;
  Status s = send_record(dst, std::move(rec), &at_once);
  if (tried && at_once) imm_limit = size;  // refused for its size, not for want of room
  return s;
}

Status UcxTransport::send(NodeId dst, std::span<const std::byte, kWireHeaderSize> header,
                          Buffer&& payload) {
  WorkerLock lock(this);
  if (dst >= peers_.size() || peers_[dst]->dead.load(std::memory_order_acquire))
    return Status::peer_failed(fmt::format("no connection to node {}", dst));
  auto rec = std::make_unique<SendRecord>(SendRecord{this, dst, {}, std::move(payload)});
  std::memcpy(rec->header.data(), header.data(), kWireHeaderSize);
  return send_record(dst, std::move(rec));
}

Status UcxTransport::send_record(NodeId dst, std::unique_ptr<SendRecord> rec, bool* at_once) {
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = &UcxTransport::send_done;
  p.user_data = rec.get();
  size_t bytes = rec->payload.size();
  ucp_ep_h ep = for_waiter_lane(rec->header) ? peers_[dst]->wait_ep : peers_[dst]->ep;
  ucs_status_ptr_t r = ucp_am_send_nbx(ep, kAmId, rec->header.data(), kWireHeaderSize,
                                       rec->payload.data(), bytes, &p);
  if (at_once != nullptr) *at_once = r == nullptr;
  if (r == nullptr) return Status::ok();
  if (UCS_PTR_IS_ERR(r))
    return Status::peer_failed(ucx_error(fmt::format("send to node {}", dst), UCS_PTR_STATUS(r)));
  // note: counted while worker_mu_ is held, so send_done (which needs progress, hence the lock)
  // cannot run before it.
  Peer& peer = *peers_[dst];
  peer.backlog_msgs.fetch_add(1, std::memory_order_relaxed);
  peer.backlog_bytes.fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  rec.release();  // owned by the request now; send_done frees it
  return Status::ok();
}

void UcxTransport::send_done(void* request, ucs_status_t status, void* user_data) {
  std::unique_ptr<SendRecord> rec(static_cast<SendRecord*>(user_data));
  (void)status;  // a failed send is reported through the endpoint's error callback
  rec->self->worker_mu_.assert_held();  // UCX calls this from inside progress
  Peer& peer = *rec->self->peers_[rec->dst];
  peer.backlog_msgs.fetch_sub(1, std::memory_order_relaxed);
  peer.backlog_bytes.fetch_sub(static_cast<int64_t>(rec->payload.size()),
                               std::memory_order_relaxed);
  ucp_request_free(request);
}

// --- Receiving -----------------------------------------------------------------------------

void UcxTransport::deliver(std::span<const std::byte> header, std::span<const std::byte> payload,
                           Buffer* owned) {
  if (sink_ == nullptr || closing_.load(std::memory_order_acquire)) return;
  Arrival a{header, payload, owned};
  sink_->on_arrival(a);
}

ucs_status_t UcxTransport::am_callback(void* arg, const void* header, size_t header_length,
                                       void* data, size_t length,
                                       const ucp_am_recv_param_t* param) {
  const auto* lane = static_cast<const Lane*>(arg);
  UcxTransport* self = lane->self;
  std::span<const std::byte> hdr(static_cast<const std::byte*>(header), header_length);
  if ((param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) == 0) {
    self->deliver(hdr, {static_cast<const std::byte*>(data), length}, nullptr);
    return UCS_OK;
  }
  // Rendezvous: receive the payload straight into a buffer of its own.
  if (header_length != kWireHeaderSize || length > kMaxPayload) {
    self->deliver(hdr, {}, nullptr);  // the sink reports the malformed header or length
    return UCS_OK;                    // drops the data
  }
  auto rec = std::make_unique<RecvRecord>(RecvRecord{self, {}, Buffer(length)});
  std::memcpy(rec->header.data(), header, kWireHeaderSize);
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.recv_am = &UcxTransport::recv_done;
  p.user_data = rec.get();
  ucs_status_ptr_t r = ucp_am_recv_data_nbx(lane->worker, data, rec->payload.data(), length, &p);
  if (r == nullptr) {
    self->deliver(rec->header, rec->payload.span(), &rec->payload);
  } else if (UCS_PTR_IS_ERR(r)) {
    self->receive_failed(rec->header, length, UCS_PTR_STATUS(r));
  } else {
    self->open_receives_.fetch_add(1, std::memory_order_relaxed);
    rec.release();  // recv_done frees it
  }
  return UCS_OK;
}

void UcxTransport::recv_done(void* request, ucs_status_t status, size_t length, void* user_data) {
  std::unique_ptr<RecvRecord> rec(static_cast<RecvRecord*>(user_data));
  rec->self->open_receives_.fetch_sub(1, std::memory_order_relaxed);
  if (status == UCS_OK && length == rec->payload.size()) {
    rec->self->deliver(rec->header, rec->payload.span(), &rec->payload);
  } else {
    rec->self->receive_failed(rec->header, rec->payload.size(), status);
  }
  ucp_request_free(request);
}

// --- Failures ------------------------------------------------------------------------------

void UcxTransport::receive_failed(std::span<const std::byte, kWireHeaderSize> header, size_t length,
                                  ucs_status_t status) {
  // why: a message that cannot be received is lost, and its sender may wait for it forever;
  // losing a message is a broken link to that node, so it is reported as the node's failure.
  WireHeader h;
  std::memcpy(&h, header.data(), kWireHeaderSize);
  if (h.src >= size_ || closing_.load(std::memory_order_acquire) || sink_ == nullptr) return;
  if (peers_[h.src]->dead.exchange(true)) return;
  sink_->on_peer_failure(
      h.src, Status::peer_failed(fmt::format("receiving a {}-byte message from node {} failed ({})",
                                             length, h.src, ucs_status_string(status))));
}

void UcxTransport::ep_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
  (void)ep;
  auto* peer = static_cast<Peer*>(arg);
  peer->self->peer_failed(peer->node, status);
}

void UcxTransport::peer_failed(NodeId node, ucs_status_t status) {
  worker_mu_.assert_held();  // UCX calls ep_error from inside progress
  if (peers_[node]->dead.exchange(true)) return;
  if (closing_.load(std::memory_order_acquire) || sink_ == nullptr) return;
  sink_->on_peer_failure(
      node, Status::peer_failed(fmt::format("lost the connection to node {} ({})", node,
                                            ucs_status_string(status))));
}

// --- One-sided -----------------------------------------------------------------------------

Result<std::string> UcxTransport::map_region(RegionId id, void* base, size_t len) {
  WorkerLock lock(this);
  if (local_regions_.count(id) != 0)
    return Status::invalid_argument(fmt::format("region {} is already registered", id));
  ucp_mem_map_params_t mp{};
  mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  mp.address = base;
  mp.length = len;
  ucp_mem_h memh = nullptr;
  ucs_status_t st = ucp_mem_map(context_, &mp, &memh);
  if (st != UCS_OK)
    return Status::resource(
        ucx_error(fmt::format("registering region {} ({} bytes)", id, len), st));
  void* key = nullptr;
  size_t key_len = 0;
  st = ucp_rkey_pack(context_, memh, &key, &key_len);
  if (st != UCS_OK) {
    ucp_mem_unmap(context_, memh);
    return Status::resource(ucx_error("ucp_rkey_pack", st));
  }
  std::string out(static_cast<const char*>(key), key_len);
  ucp_rkey_buffer_release(key);
  local_regions_[id] = memh;
  return out;
}

Status UcxTransport::add_remote_region(NodeId peer, RegionId id, uint64_t remote_base, size_t len,
                                       std::span<const std::byte> key) {
  WorkerLock lock(this);
  if (peer >= peers_.size()) return Status::invalid_argument(fmt::format("no node {}", peer));
  ucp_rkey_h rkey = nullptr;
  ucs_status_t st = ucp_ep_rkey_unpack(peers_[peer]->ep, key.data(), &rkey);
  if (st != UCS_OK)
    return Status::malformed(
        ucx_error(fmt::format("node {} sent an unusable key for region {}", peer, id), st));
  RemoteRegion& r = remote_regions_[{peer, id}];
  if (r.rkey != nullptr) ucp_rkey_destroy(r.rkey);
  r = RemoteRegion{remote_base, len, rkey};
  return Status::ok();
}

Result<const UcxTransport::RemoteRegion*> UcxTransport::remote(NodeId peer, RegionId id,
                                                               uint64_t offset, size_t len) {
  if (peer >= peers_.size() || peers_[peer]->dead.load())
    return Status::peer_failed(fmt::format("no connection to node {}", peer));
  auto it = remote_regions_.find({peer, id});
  if (it == remote_regions_.end())
    return Status::not_found(fmt::format("node {} has no region {} registered here", peer, id));
  if (offset > it->second.len || len > it->second.len - offset)
    return Status::invalid_argument(
        fmt::format("range [{}, {}) is outside node {}'s region {} of {} bytes", offset,
                    offset + len, peer, id, it->second.len));
  return &it->second;
}

namespace {
void op_done(void* request, ucs_status_t status, void* user_data) {
  auto* cb = static_cast<OpCallback*>(user_data);
  cb->complete(status == UCS_OK ? Status::ok()
                                : Status::peer_failed(ucx_error("one-sided transfer", status)));
  ucp_request_free(request);
}

void finish(ucs_status_ptr_t r, OpCallback* done) {
  if (r == nullptr) {
    done->complete(Status::ok());
  } else if (UCS_PTR_IS_ERR(r)) {
    done->complete(Status::peer_failed(ucx_error("one-sided transfer", UCS_PTR_STATUS(r))));
  }
  // otherwise op_done completes it
}
}  // namespace

Status UcxTransport::put(NodeId peer, RegionId id, uint64_t offset, const void* src, size_t len,
                         OpCallback* done) {
  WorkerLock lock(this);
  Result<const RemoteRegion*> rr = remote(peer, id, offset, len);
  if (!rr) return rr.status();
  ucp_request_param_t p{};
  ucs_status_ptr_t r =
      ucp_put_nbx(peers_[peer]->ep, src, len, (*rr)->base + offset, (*rr)->rkey, &p);
  if (UCS_PTR_IS_ERR(r)) return Status::peer_failed(ucx_error("put", UCS_PTR_STATUS(r)));
  if (r != nullptr) ucp_request_free(r);  // completion is tracked by the flush below
  // why: a put's own completion is local (the source may be reused); the flush completes once
  // the data has reached the target, which is what callers wait for.
  ucp_request_param_t fp{};
  fp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  fp.cb.send = &op_done;
  fp.user_data = done;
  finish(ucp_ep_flush_nbx(peers_[peer]->ep, &fp), done);
  return Status::ok();
}

Status UcxTransport::get(NodeId peer, RegionId id, uint64_t offset, void* dst, size_t len,
                         OpCallback* done) {
  WorkerLock lock(this);
  Result<const RemoteRegion*> rr = remote(peer, id, offset, len);
  if (!rr) return rr.status();
  ucp_request_param_t p{};
  p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  p.cb.send = &op_done;
  p.user_data = done;
  finish(ucp_get_nbx(peers_[peer]->ep, dst, len, (*rr)->base + offset, (*rr)->rkey, &p), done);
  return Status::ok();
}

// --- Progress ------------------------------------------------------------------------------

bool UcxTransport::progress_locked() {
  bool did = false;
  // Bounded so one busy peer cannot keep the caller here forever.
  for (int i = 0; i < 64 && ucp_worker_progress(worker_) != 0; ++i) did = true;
  return did;
}

bool UcxTransport::progress_waiter_lane() {
  t_wait_holder = this;
  bool did = false;
  for (int i = 0; i < 64 && ucp_worker_progress(wait_worker_) != 0; ++i) did = true;
  t_wait_holder = nullptr;
  return did;
}

bool UcxTransport::progress() {
  LOOM_CHECK(t_worker_holder != this && t_wait_holder != this,
             "progress() called from inside a UCX callback");
  bool did = false;
  // The waiter lane now and then, and only if no waiting thread polls it right now: its replies
  // are for threads that poll it themselves, or that sleep, and then the server thread needs
  // them only within a wake-up's time. With no thread asleep in a wait, rarely (only UCX's own
  // traffic on that worker could need it then): each look costs a lock and a progress call,
  // which a hot loop of short messages pays in latency.
  static thread_local unsigned calls = 0;
  ++calls;
  const bool look = (calls & 63) == 0 ||
                    ((calls & 3) == 0 && waiter_sleepers_.load(std::memory_order_relaxed) > 0);
  if (look && wait_mu_.try_lock()) {
    did = progress_waiter_lane();
    wait_mu_.unlock();
  }
  if (lock_waiters_.load(std::memory_order_relaxed) > 0) return did;  // let them in first
  WorkerLock lock(this);
  return progress_locked() || did;
}

bool UcxTransport::try_progress() {
  if (t_worker_holder == this || t_wait_holder == this) return false;
  bool did = false;
  // note: the waiter lane first: it has the replies the calling thread waits for.
  if (wait_mu_.try_lock()) {
    did = progress_waiter_lane();
    wait_mu_.unlock();
  }
  // The main worker now and then (one-sided completions, sends left to finish): a waiting
  // thread's reply comes on the waiter lane, and the server thread drives the main worker.
  static thread_local unsigned calls = 0;
  if ((++calls & 7) != 0 || !worker_mu_.try_lock()) return did;
  t_worker_holder = this;
  did |= progress_locked();
  t_worker_holder = nullptr;
  worker_mu_.unlock();
  return did;
}

bool UcxTransport::arm_waiter_lane() {
  ucs_status_t st = ucp_worker_arm(wait_worker_);
  if (st == UCS_ERR_BUSY) return false;
  LOOM_CHECK(st == UCS_OK, "ucp_worker_arm (waiter lane): {}", ucs_status_string(st));
  return true;
}

bool UcxTransport::arm() {
  {
    WorkerLock lock(this);
    ucs_status_t st = ucp_worker_arm(worker_);
    if (st == UCS_ERR_BUSY) return false;
    LOOM_CHECK(st == UCS_OK, "ucp_worker_arm: {}", ucs_status_string(st));
  }
  // The waiter lane wakes this thread only while a waiting thread sleeps (it cannot poll then);
  // re-armed here, since a reply that woke us consumed the arming.
  MutexLock lock(wait_mu_);
  return waiter_sleepers_.load(std::memory_order_relaxed) == 0 || arm_waiter_lane();
}

bool UcxTransport::begin_waiter_sleep() {
  MutexLock lock(wait_mu_);
  if (waiter_sleepers_.fetch_add(1, std::memory_order_relaxed) == 0) watch_waiter_lane(true);
  return arm_waiter_lane();
}

void UcxTransport::end_waiter_sleep() {
  MutexLock lock(wait_mu_);
  if (waiter_sleepers_.fetch_sub(1, std::memory_order_relaxed) == 1) watch_waiter_lane(false);
}

void UcxTransport::watch_waiter_lane(bool on) {
  struct epoll_event ev {};
  ev.events = EPOLLIN;
  ev.data.fd = wait_efd_;
  int rc = epoll_ctl(epfd_, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, wait_efd_, &ev);
  LOOM_CHECK(rc == 0, "epoll_ctl({}, waiter lane): {}", on ? "add" : "del", std::strerror(errno));
}

void UcxTransport::close(int timeout_ms) {
  if (closing_.exchange(true)) return;
  // note: create() may have failed before the workers existed (an unusable LOOM_TRANSPORTS).
  if (worker_ == nullptr) return;
  WorkerLock lock(this);
  int64_t deadline = now_ns() + int64_t{timeout_ms} * 1000000;
  // Flush what is in flight, then close every endpoint.
  ucp_request_param_t fp{};
  ucs_status_ptr_t fr = ucp_worker_flush_nbx(worker_, &fp);
  if (fr != nullptr && !UCS_PTR_IS_ERR(fr)) {
    while (ucp_request_check_status(fr) == UCS_INPROGRESS && now_ns() < deadline)
      ucp_worker_progress(worker_);
    ucp_request_free(fr);
  }
  for (auto& [key, r] : remote_regions_)
    if (r.rkey != nullptr) ucp_rkey_destroy(r.rkey);
  remote_regions_.clear();
  std::vector<ucs_status_ptr_t> closing;
  for (auto& peer : peers_) {
    if (peer->activation_ep != nullptr && wait_mu_.try_lock()) {
      // note: a forced close of an endpoint that never sent completes at once, or soon.
      if (ucs_status_ptr_t r = close_forced(peer->activation_ep); r != nullptr) {
        while (ucp_request_check_status(r) == UCS_INPROGRESS && now_ns() < deadline)
          ucp_worker_progress(wait_worker_);
        ucp_request_free(r);
      }
      peer->activation_ep = nullptr;
      wait_mu_.unlock();
    }
    for (ucp_ep_h* ep : {&peer->ep, &peer->wait_ep}) {
      if (*ep == nullptr) continue;
      if (ucs_status_ptr_t r = close_forced(*ep); r != nullptr) closing.push_back(r);
      *ep = nullptr;
    }
    peer->dead = true;
  }
  for (ucs_status_ptr_t r : closing) {
    while (ucp_request_check_status(r) == UCS_INPROGRESS && now_ns() < deadline) {
      ucp_worker_progress(worker_);
      // note: try_lock, since the lock order is wait_mu_ before worker_mu_.
      if (wait_mu_.try_lock()) {
        ucp_worker_progress(wait_worker_);
        wait_mu_.unlock();
      }
    }
    ucp_request_free(r);
  }
}

}  // namespace loom::comm

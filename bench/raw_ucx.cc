#include "raw_ucx.h"

#include <fmt/format.h>
#include <poll.h>
#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bench_util.h"

namespace loom::bench {
namespace {

// The same bounds as Loom's default flow control (LOOM_MAX_INFLIGHT, LOOM_MAX_INFLIGHT_BYTES).
constexpr uint32_t kMaxSendsInFlight = 256;
constexpr uint64_t kMaxBytesInFlight = 32u << 20;
// Largest reply or streamed message.
constexpr size_t kMaxMessage = 1u << 20;
// Streams with distinct sources send message i from its own slice of this much memory (Loom's
// owned sends use one buffer per message), and rendezvous payloads land in successive slices of a
// ring as large as the flow-control window (Loom allocates a buffer per received payload).
constexpr size_t kTxRegion = 128u << 20;
constexpr size_t kSinkRing = kMaxBytesInFlight;
// The server's sleep is bounded like Loom's (its tick).
constexpr int kPollTimeoutMs = 100;

std::string ucx_error(std::string_view what, ucs_status_t st) {
  return fmt::format("raw UCX: {}: {}", what, ucs_status_string(st));
}

// The client's wait policy (raw_ucx.h, "Progress").
template <typename Done>
void client_wait(ucp_worker_h worker, int efd, int64_t spin_ns, Done&& done) {
  int64_t start = now_ns();
  unsigned n = 0;
  while (!done()) {
    if (ucp_worker_progress(worker) != 0) continue;
    if ((++n & 63) != 0 || now_ns() - start <= spin_ns) continue;
    if (ucp_worker_arm(worker) == UCS_ERR_BUSY) continue;  // events pending: poll again
    struct pollfd pfd = {};
    pfd.fd = efd;
    pfd.events = POLLIN;
    ::poll(&pfd, 1, kPollTimeoutMs);
  }
}

}  // namespace

Result<std::unique_ptr<RawUcx>> RawUcx::create(const Options& options) {
  std::unique_ptr<RawUcx> r(new RawUcx());
  r->opts_ = options;
  // note: the UCX_* variables Loom set when it started (error handling, keepalive) are in the
  // environment now, so ucp_config_read gives this context the same configuration as Loom's.
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) return Status::io(ucx_error("ucp_config_read", st));
  std::unique_ptr<ucp_config_t, void (*)(ucp_config_t*)> guard(config, ucp_config_release);
  if (!options.tls.empty() &&
      (st = ucp_config_modify(config, "TLS", options.tls.c_str())) != UCS_OK)
    return Status::invalid_argument(ucx_error(fmt::format("TLS='{}'", options.tls), st));
  if (!options.net_devices.empty() &&
      (st = ucp_config_modify(config, "NET_DEVICES", options.net_devices.c_str())) != UCS_OK)
    return Status::invalid_argument(
        ucx_error(fmt::format("NET_DEVICES='{}'", options.net_devices), st));

  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_RMA | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  if ((st = ucp_init(&params, config, &r->context_)) != UCS_OK)
    return Status::io(ucx_error("ucp_init", st));

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  if ((st = ucp_worker_create(r->context_, &wp, &r->worker_)) != UCS_OK)
    return Status::io(ucx_error("ucp_worker_create", st));
  if ((st = ucp_worker_get_efd(r->worker_, &r->efd_)) != UCS_OK)
    return Status::io(ucx_error("ucp_worker_get_efd", st));

  ucp_address_t* addr = nullptr;
  size_t addr_len = 0;
  if ((st = ucp_worker_get_address(r->worker_, &addr, &addr_len)) != UCS_OK)
    return Status::io(ucx_error("ucp_worker_get_address", st));
  r->address_.assign(reinterpret_cast<const char*>(addr), addr_len);
  ucp_worker_release_address(r->worker_, addr);

  for (unsigned id = 0; id < kNumIds; ++id) {
    ucp_am_handler_param_t hp{};
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                    UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG;
    hp.id = id;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    hp.cb = &RawUcx::on_am;
    r->contexts_[id] = AmContext{r.get(), id};
    hp.arg = &r->contexts_[id];
    if ((st = ucp_worker_set_am_recv_handler(r->worker_, &hp)) != UCS_OK)
      return Status::io(ucx_error("ucp_worker_set_am_recv_handler", st));
  }

  r->rx_.resize(kMaxMessage);
  r->tx_.assign(kTxRegion, std::byte{0x5a});
  r->reply_src_.assign(kMaxMessage, std::byte{0xa5});
  r->sink_.assign(kSinkRing, std::byte{0});
  return r;
}

RawUcx::~RawUcx() {
  close();
  if (worker_ != nullptr) ucp_worker_destroy(worker_);
  if (context_ != nullptr) ucp_cleanup(context_);
}

Status RawUcx::connect(const std::string& peer_address) {
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep.address = reinterpret_cast<const ucp_address_t*>(peer_address.data());
  if (opts_.err_handling) {
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.err_handler.cb = &RawUcx::on_ep_error;
    ep.err_handler.arg = this;
  } else {
    ep.err_mode = UCP_ERR_HANDLING_MODE_NONE;
  }
  ucs_status_t st = ucp_ep_create(worker_, &ep, &ep_);
  if (st != UCS_OK) return Status::peer_failed(ucx_error("ucp_ep_create", st));
  return Status::ok();
}

std::string RawUcx::describe() {
  if (ep_ == nullptr) return "";
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  if (f == nullptr) return "";
  ucp_ep_print_info(ep_, f);
  std::fclose(f);
  std::string s(buf, len);
  std::free(buf);
  return s;
}

void RawUcx::close() {
  if (ep_ == nullptr) return;
  closing_ = true;
  ucp_request_param_t cp{};
  cp.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  cp.flags = UCP_EP_CLOSE_FLAG_FORCE;
  ucs_status_ptr_t r = ucp_ep_close_nbx(ep_, &cp);
  if (UCS_PTR_IS_PTR(r)) {
    while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(worker_);
    ucp_request_free(r);
  }
  ep_ = nullptr;
}

// --- Receiving -----------------------------------------------------------------------------

ucs_status_t RawUcx::on_am(void* arg, const void* header, size_t header_length, void* data,
                           size_t length, const ucp_am_recv_param_t* param) {
  (void)header;
  (void)header_length;
  auto* ctx = static_cast<AmContext*>(arg);
  ctx->self->receive(ctx->id, data, length, param);
  return UCS_OK;  // eager data is consumed; rendezvous data was started into our buffer
}

void RawUcx::receive(unsigned id, void* data, size_t length, const ucp_am_recv_param_t* param) {
  bool rndv = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  if (rndv) {
    // Only replies and streamed messages are large enough for rendezvous.
    if ((id != kReply && id != kStream) || length > kMaxMessage) std::abort();
    std::byte* dst = rx_.data();
    if (id == kStream) {
      if (sink_offset_ + length > sink_.size()) sink_offset_ = 0;
      dst = sink_.data() + sink_offset_;
      sink_offset_ += length;
    }
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.recv_am = &RawUcx::on_recv_done;
    AmContext* ctx = &contexts_[id];
    p.user_data = ctx;
    ucs_status_ptr_t r = ucp_am_recv_data_nbx(worker_, data, dst, length, &p);
    if (r == nullptr) {
      on_recv_done(nullptr, UCS_OK, length, ctx);
    } else if (UCS_PTR_IS_ERR(r)) {
      ep_status_ = UCS_PTR_STATUS(r);
    }
    return;
  }
  switch (id) {
    case kRequest: {
      uint64_t size = 0;
      if (length == sizeof size) std::memcpy(&size, data, sizeof size);
      if (size > reply_src_.size()) size = reply_src_.size();
      ucp_request_param_t p{};
      // note: reply_src_ never changes, so the request can be released before it completes.
      ucs_status_ptr_t r = ucp_am_send_nbx(ep_, kReply, nullptr, 0, reply_src_.data(), size, &p);
      if (UCS_PTR_IS_PTR(r)) {
        ucp_request_free(r);
      } else if (UCS_PTR_IS_ERR(r)) {
        ep_status_ = UCS_PTR_STATUS(r);
      }
      break;
    }
    case kReply:
      std::memcpy(rx_.data(), data, std::min(length, rx_.size()));
      reply_done_ = true;
      break;
    case kStream:
      received_stream_bytes(length);
      break;
    case kSync: {
      uint64_t want = 0;
      if (length == sizeof want) std::memcpy(&want, data, sizeof want);
      if (stream_bytes_ >= want) {
        reply_ack();
      } else {
        sync_waiting_for_ = want;
      }
      break;
    }
    case kControl: {
      Control c{};
      if (length == sizeof c) std::memcpy(&c, data, sizeof c);
      spin_ns_ = c.spin_ns;
      quit_ = c.quit != 0;
      reply_ack();
      break;
    }
    case kAck:
      ++acks_;
      break;
    default:
      break;
  }
}

void RawUcx::on_recv_done(void* request, ucs_status_t status, size_t length, void* user_data) {
  auto* ctx = static_cast<AmContext*>(user_data);
  RawUcx* self = ctx->self;
  if (status != UCS_OK) self->ep_status_ = status;
  if (ctx->id == kReply) {
    self->reply_done_ = true;
  } else {
    self->received_stream_bytes(length);
  }
  if (request != nullptr) ucp_request_free(request);
}

void RawUcx::received_stream_bytes(size_t n) {
  stream_bytes_ += n;
  if (sync_waiting_for_ != 0 && stream_bytes_ >= sync_waiting_for_) {
    sync_waiting_for_ = 0;
    reply_ack();
  }
}

void RawUcx::reply_ack() {
  ucp_request_param_t p{};
  ucs_status_ptr_t r =
      ucp_am_send_nbx(ep_, kAck, nullptr, 0, &ack_payload_, sizeof ack_payload_, &p);
  if (UCS_PTR_IS_PTR(r)) {
    ucp_request_free(r);  // ack_payload_ never changes
  } else if (UCS_PTR_IS_ERR(r)) {
    ep_status_ = UCS_PTR_STATUS(r);
  }
}

void RawUcx::on_ep_error(void* arg, ucp_ep_h ep, ucs_status_t status) {
  (void)ep;
  auto* self = static_cast<RawUcx*>(arg);
  if (!self->closing_) self->ep_status_ = status;
}

// --- Server --------------------------------------------------------------------------------

void RawUcx::serve() {
  int64_t idle_since = now_ns();
  unsigned spins = 0;
  while (!quit_ && ep_status_ == UCS_OK) {
    if (ucp_worker_progress(worker_) != 0) {
      idle_since = now_ns();
      spins = 0;
      continue;
    }
    if (spin_ns_ < 0) continue;  // hot: busy-poll
    if (now_ns() - idle_since < spin_ns_) {
      // note: as Loom's ServerThread does while it spins, yield now and then.
      if ((++spins & 15) == 0) {
        sched_yield();
      } else {
        __builtin_ia32_pause();
      }
      continue;
    }
    if (ucp_worker_arm(worker_) == UCS_ERR_BUSY) continue;  // events pending: poll again
    struct pollfd pfd = {};
    pfd.fd = efd_;
    pfd.events = POLLIN;
    ::poll(&pfd, 1, kPollTimeoutMs);
    idle_since = now_ns();
  }
  // Let the last ack leave before the caller closes the endpoint.
  int64_t until = now_ns() + 10'000'000;
  while (now_ns() < until) ucp_worker_progress(worker_);
}

// --- Client --------------------------------------------------------------------------------

void RawUcx::on_send_done(void* request, ucs_status_t status, void* user_data) {
  auto* self = static_cast<RawUcx*>(user_data);
  if (status != UCS_OK && !self->closing_) self->ep_status_ = status;
  --self->sends_in_flight_;
  self->bytes_in_flight_ -= self->streamed_size_;
  ucp_request_free(request);
}

void RawUcx::progress_until_sent(ucs_status_ptr_t r) {
  if (r == nullptr) return;
  if (UCS_PTR_IS_ERR(r)) {
    ep_status_ = UCS_PTR_STATUS(r);
    return;
  }
  while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(worker_);
  ucp_request_free(r);
}

void RawUcx::wait_for(const bool* flag) {
  client_wait(worker_, efd_, opts_.wait_spin_ns, [&] { return *flag || ep_status_ != UCS_OK; });
}

void RawUcx::wait_for_acks(uint64_t target) {
  client_wait(worker_, efd_, opts_.wait_spin_ns,
              [&] { return acks_ >= target || ep_status_ != UCS_OK; });
}

Status RawUcx::send_and_wait(unsigned id, const void* data, size_t len) {
  uint64_t target = acks_ + 1;
  ucp_request_param_t p{};
  progress_until_sent(ucp_am_send_nbx(ep_, id, nullptr, 0, data, len, &p));
  wait_for_acks(target);
  if (ep_status_ != UCS_OK) return Status::peer_failed(ucx_error("endpoint", ep_status_));
  return Status::ok();
}

Status RawUcx::set_server_spin(int64_t spin_ns) {
  control_ = Control{spin_ns, 0};
  return send_and_wait(kControl, &control_, sizeof control_);
}

Status RawUcx::quit_server() {
  control_ = Control{0, 1};
  return send_and_wait(kControl, &control_, sizeof control_);
}

Status RawUcx::round_trip(size_t reply_size) {
  reply_done_ = false;
  request_ = reply_size;
  ucp_request_param_t p{};
  ucs_status_ptr_t r = ucp_am_send_nbx(ep_, kRequest, nullptr, 0, &request_, sizeof request_, &p);
  if (UCS_PTR_IS_ERR(r)) return Status::peer_failed(ucx_error("send", UCS_PTR_STATUS(r)));
  wait_for(&reply_done_);
  progress_until_sent(r);  // the request went out long ago; this only releases it
  if (ep_status_ != UCS_OK) return Status::peer_failed(ucx_error("endpoint", ep_status_));
  return Status::ok();
}

Result<int64_t> RawUcx::stream(size_t size, int count, bool distinct_sources) {
  if (size == 0 || size > kMaxMessage) return Status::invalid_argument("bad message size");
  const size_t slots = tx_.size() / size;
  streamed_size_ = size;
  int64_t t0 = now_ns();
  for (int i = 0; i < count; ++i) {
    while (sends_in_flight_ > 0 &&
           (sends_in_flight_ >= kMaxSendsInFlight || bytes_in_flight_ + size > kMaxBytesInFlight)) {
      ucp_worker_progress(worker_);
    }
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = &RawUcx::on_send_done;
    p.user_data = this;
    size_t offset = distinct_sources ? (static_cast<size_t>(i) % slots) * size : 0;
    ucs_status_ptr_t r = ucp_am_send_nbx(ep_, kStream, nullptr, 0, tx_.data() + offset, size, &p);
    if (UCS_PTR_IS_ERR(r)) return Status::peer_failed(ucx_error("send", UCS_PTR_STATUS(r)));
    if (r != nullptr) {
      ++sends_in_flight_;
      bytes_in_flight_ += size;
    }
    streamed_ += size;
  }
  sync_payload_ = streamed_;
  if (Status s = send_and_wait(kSync, &sync_payload_, sizeof sync_payload_); !s) return s;
  int64_t elapsed = now_ns() - t0;
  // The acks mean the data arrived; drain our send completions before the next batch.
  while (sends_in_flight_ > 0 && ep_status_ == UCS_OK) ucp_worker_progress(worker_);
  return elapsed;
}

}  // namespace loom::bench

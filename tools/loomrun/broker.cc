#include "broker.h"

#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "sys.h"

namespace loom::loomrun {
namespace {

// How much one readable event may read from one connection before others get a turn.
constexpr size_t kReadBudget = 4 << 20;

// Compares tokens without an early exit, so timing does not reveal a prefix.
bool same_token(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

Result<std::unique_ptr<Broker>> Broker::listen(const std::string& path, uint32_t size,
                                               std::string token, BrokerListener* listener) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.size() >= sizeof sa.sun_path)
    return Status::invalid_argument(fmt::format("socket path '{}' is too long", path));
  std::memcpy(sa.sun_path, path.data(), path.size());
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status::from_errno("socket", errno);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
    return Status::from_errno(fmt::format("bind({})", path), errno);
  if (::listen(fd.get(), SOMAXCONN) != 0) return Status::from_errno("listen", errno);
  return std::unique_ptr<Broker>(new Broker(std::move(fd), size, std::move(token), listener));
}

Broker::Broker(UniqueFd listen_fd, uint32_t size, std::string token, BrokerListener* listener)
    : listen_fd_(std::move(listen_fd)),
      size_(size),
      token_(std::move(token)),
      listener_(listener),
      by_rank_(size, nullptr),
      next_seq_(size, 0),
      departed_(size, false),
      owed_(size) {}

void Broker::add_to(PollSet* ps) {
  // Free connections closed during the previous round; nothing refers to them any more.
  std::erase_if(conns_, [](const std::unique_ptr<Conn>& c) { return c->closed; });
  ps->add(listen_fd_.get(), POLLIN, [this](short) { accept_all(); });
  for (auto& c : conns_) {
    short events = (c->closing ? 0 : POLLIN) | (c->out.empty() ? 0 : POLLOUT);
    Conn* raw = c.get();
    // events == 0 still reports POLLHUP/POLLERR, which closes a refused connection.
    ps->add(c->fd.get(), events, [this, raw](short revents) { on_conn_event(raw, revents); });
  }
}

void Broker::accept_all() {
  while (true) {
    int fd = ::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        warn(fmt::format("accept on the bootstrap socket: {}", std::strerror(errno)));
      return;
    }
    if (pending_ >= kMaxPending) {
      // why: closing the new connection instead would let idle connections keep the nodes out.
      // A node sends its HELLO at once, so the oldest unidentified connection is the likeliest
      // to be a stray.
      if (!warned_pending_)
        warn(
            fmt::format("more than {} unidentified connections to the bootstrap socket; closing "
                        "the oldest silent one",
                        kMaxPending));
      warned_pending_ = true;
      // A connection that has sent something (read, or waiting in its socket), or that was
      // accepted less than kSilentGrace ago, may be a node whose HELLO is on its way (it was
      // found closing a node that had connected but not yet sent: broken pipe): the oldest
      // connection silent for longer goes. If there is none, the new one is kept too, up to
      // kMaxPendingHard; beyond that the oldest silent one goes whatever its age.
      const Clock::time_point now = Clock::now();
      Conn* victim = nullptr;
      Conn* oldest_silent = nullptr;
      for (auto& c : conns_) {
        if (c->closed || c->rank != kNoRank) continue;
        char byte;
        const bool spoke =
            c->reader.buffered() > 0 || ::recv(c->fd.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
        if (spoke) continue;
        if (oldest_silent == nullptr || c->accepted_at < oldest_silent->accepted_at)
          oldest_silent = c.get();
        if (now - c->accepted_at >= kSilentGrace &&
            (victim == nullptr || c->accepted_at < victim->accepted_at))
          victim = c.get();
      }
      if (victim == nullptr && pending_ >= kMaxPendingHard) victim = oldest_silent;
      if (victim != nullptr) close_conn(victim);
    }
    auto c = std::make_unique<Conn>();
    c->fd.reset(fd);
    c->accepted_at = Clock::now();
    ++pending_;
    conns_.push_back(std::move(c));
  }
}

void Broker::on_conn_event(Conn* c, short revents) {
  if (c->closed) return;
  if (revents & POLLOUT) flush(c);
  if (c->closed) return;
  if (c->closing) {
    if (revents & (POLLHUP | POLLERR)) close_conn(c);
    return;
  }
  if (revents & (POLLIN | POLLHUP | POLLERR)) read_from(c);
}

void Broker::drain(uint32_t rank) {
  if (rank < size_ && by_rank_[rank] != nullptr) read_from(by_rank_[rank]);
}

void Broker::read_from(Conn* c) {
  char buf[64 * 1024];
  size_t budget = kReadBudget;
  bool eof = false;
  while (budget > 0 && !c->closed && !c->closing) {
    ssize_t n = ::recv(c->fd.get(), buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      c->reader.append(std::string_view(buf, static_cast<size_t>(n)));
      budget -= std::min(budget, static_cast<size_t>(n));
      // An unidentified connection gets no more than a HELLO's worth of buffer: a stray client
      // must not make loomrun hold a 64 MiB frame.
      if (c->rank == kNoRank && c->reader.buffered() > kMaxHelloBytes) {
        auto next = c->reader.next();
        if (!next || !next->has_value()) {
          refuse(c, "", fmt::format("more than {} bytes before a complete HELLO", kMaxHelloBytes));
          return;
        }
        handle_frame(c, std::move(**next));
      }
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      break;
    } else {
      eof = true;  // EOF, or ECONNRESET and friends: the peer is gone either way
      break;
    }
    // Handle frames as they complete, so a refused or broken connection stops being read.
    while (!c->closed && !c->closing) {
      auto next = c->reader.next();
      if (!next) {
        if (c->rank == kNoRank)
          refuse(c, "", "malformed frame: " + next.status().message());
        else
          protocol_error(c, next.status().message());
        return;
      }
      if (!next->has_value()) break;
      handle_frame(c, std::move(**next));
    }
  }
  if (eof && !c->closed) close_conn(c);
}

void Broker::handle_frame(Conn* c, boot::Frame f) {
  if (c->rank == kNoRank) {
    handle_hello(c, f);
    return;
  }
  switch (f.kind) {
    case boot::Kind::kAllgather:
      handle_allgather(c, f);
      return;
    case boot::Kind::kBye: {
      boot::Bye m;
      Status s = boot::decode(f, &m);
      if (!s) return protocol_error(c, s.message());
      c->said_bye = true;
      departed_[c->rank] = true;
      // After its goodbye a node only exits; within the bound of its last step, if it had one.
      Owed& o = owed_[c->rank];
      uint32_t bound = o.bound_ms;
      owe(c->rank, "exit after saying goodbye (shutdown)", bound);
      listener_->on_bye(c->rank, m.exit_code);
      check_departed(c->rank);
      return;
    }
    case boot::Kind::kAbort: {
      boot::Abort m;
      Status s = boot::decode(f, &m);
      if (!s) return protocol_error(c, s.message());
      uint32_t culprit = m.culprit < size_ && m.culprit != c->rank ? m.culprit : kNoRank;
      listener_->on_abort(c->rank, m.reason, culprit);
      return;
    }
    default:
      protocol_error(
          c, fmt::format("unexpected {} frame", boot::kind_name(static_cast<uint16_t>(f.kind))));
      return;
  }
}

void Broker::handle_hello(Conn* c, const boot::Frame& f) {
  boot::Hello m;
  Status s = boot::decode(f, &m);
  if (!s) return refuse(c, "", s.message());
  std::string who = fmt::format(" from pid {} (rank {})", m.pid, m.rank);
  if (!same_token(m.token, token_)) return refuse(c, who, "wrong job token");
  if (m.rank >= size_)
    return refuse(c, who,
                  fmt::format("rank {} is out of range (the job has {} nodes)", m.rank, size_));
  if (by_rank_[m.rank] != nullptr)
    return refuse(
        c, who,
        fmt::format("rank {} is already connected (pid {})", m.rank, by_rank_[m.rank]->pid));
  if (departed_[m.rank])
    return refuse(c, who, fmt::format("rank {} has already left the job", m.rank));
  c->rank = m.rank;
  c->pid = m.pid;
  by_rank_[m.rank] = c;
  --pending_;
  owe(m.rank, "reach the address exchange (bootstrap)", m.next_bound_ms);
  boot::Ok ok;
  ok.size = size_;
  enqueue(c, std::make_shared<const std::string>(boot::encode(ok)));
  // A node that arrives after the job began failing learns it at once.
  if (failure_frame_) enqueue(c, failure_frame_);
  listener_->on_hello(m.rank, m.pid);
}

void Broker::handle_allgather(Conn* c, const boot::Frame& f) {
  boot::Allgather m;
  Status s = boot::decode(f, &m);
  if (!s) return protocol_error(c, s.message());
  uint32_t r = c->rank;
  if (m.seq != next_seq_[r])
    return protocol_error(
        c, fmt::format("ALLGATHER #{} out of order (expected #{})", m.seq, next_seq_[r]));
  ++next_seq_[r];
  Owed& o = owed_[r];
  o.deadline.reset();
  o.next_bound_ms = m.next_bound_ms;
  o.next_what = m.step == boot::Step::kShutdownLast
                    ? fmt::format("say goodbye after {}", m.what)
                    : fmt::format("reach its next step after {}", m.what);
  Round& round = rounds_[m.seq];
  if (round.blobs.empty()) {
    round.blobs.resize(size_);
    round.step = m.step;
    round.what = m.what;
    round.first = r;
  } else if (m.step != round.step) {
    // note: a node that enters its shutdown while others wait in an application collective has
    // left the job while they still need it; otherwise the later one is out of step.
    bool mine_is_shutdown = m.step == boot::Step::kShutdown;
    bool first_is_shutdown = round.step == boot::Step::kShutdown;
    uint32_t blame = first_is_shutdown && !mine_is_shutdown ? round.first : r;
    std::string text = fmt::format(
        "collective #{}: node {} is at {} ({}) while node {} is at {} ({}); every node must take "
        "part in the same collectives",
        m.seq, r, m.what.empty() ? "an application collective" : m.what, boot::step_name(m.step),
        round.first, round.what.empty() ? "an application collective" : round.what,
        boot::step_name(round.step));
    return listener_->on_collective_mismatch(m.seq, blame, text);
  }
  round.blobs[r] = std::move(m.blob);
  ++round.count;
  // A node that has left will never contribute.
  for (uint32_t d = 0; d < size_; ++d)
    if (departed_[d] && next_seq_[d] <= m.seq) return listener_->on_collective_stuck(m.seq, d);
  if (round.count == size_) complete_round(m.seq);
}

void Broker::complete_round(uint64_t seq) {
  auto it = rounds_.find(seq);
  boot::AllgatherResult result;
  result.seq = seq;
  result.blobs = std::move(it->second.blobs);
  rounds_.erase(it);
  size_t payload = boot::allgather_result_payload_size(result.blobs);
  if (!boot::fits_in_frame(payload))
    return listener_->on_collective_too_large(seq, payload + boot::kFrameHeaderSize);
  auto frame = std::make_shared<const std::string>(boot::encode(result));
  for (Conn* c : by_rank_)
    if (c != nullptr) enqueue(c, frame);
  // From now on every node owes what its contribution announced.
  for (uint32_t r = 0; r < size_; ++r) {
    Owed& o = owed_[r];
    if (o.next_bound_ms > 0) owe(r, o.next_what, o.next_bound_ms);
    o.next_bound_ms = 0;
  }
}

void Broker::owe(uint32_t rank, std::string what, uint32_t bound_ms) {
  Owed& o = owed_[rank];
  o.what = std::move(what);
  o.bound_ms = bound_ms;
  if (bound_ms == 0)
    o.deadline.reset();
  else
    o.deadline = Clock::now() + std::chrono::milliseconds(bound_ms);
}

void Broker::expect_hello(uint32_t rank, uint32_t bound_ms) {
  owe(rank, "connect to loomrun (bootstrap)", bound_ms);
}

std::optional<Broker::Clock::time_point> Broker::next_deadline() const {
  std::optional<Clock::time_point> next;
  auto consider = [&](Clock::time_point t) {
    if (!next || t < *next) next = t;
  };
  for (const Owed& o : owed_)
    if (o.deadline) consider(*o.deadline);
  for (const auto& c : conns_)
    if (!c->closed && c->rank == kNoRank) consider(c->accepted_at + kHelloWait);
  return next;
}

void Broker::check_deadlines(Clock::time_point now) {
  for (auto& c : conns_) {
    if (c->closed || c->rank != kNoRank || now < c->accepted_at + kHelloWait) continue;
    if (!c->closing)
      warn(fmt::format("closed a bootstrap connection that sent no HELLO within {} ms",
                       kHelloWait.count()));
    close_conn(c.get());
  }
  for (uint32_t r = 0; r < size_; ++r) {
    Owed& o = owed_[r];
    if (!o.deadline || now < *o.deadline) continue;
    o.deadline.reset();
    listener_->on_overdue(r, o.what, o.bound_ms);
  }
}

void Broker::check_departed(uint32_t rank) {
  for (const auto& [seq, round] : rounds_)
    if (seq >= next_seq_[rank]) return listener_->on_collective_stuck(seq, rank);
}

void Broker::node_exited(uint32_t rank) {
  owed_[rank].deadline.reset();
  owed_[rank].next_bound_ms = 0;
  if (departed_[rank]) return;
  departed_[rank] = true;
  check_departed(rank);
}

void Broker::refuse(Conn* c, const std::string& who, const std::string& reason) {
  warn(fmt::format("refused a bootstrap connection{}: {}", who, reason));
  boot::Refuse m;
  m.reason = reason;
  enqueue(c, std::make_shared<const std::string>(boot::encode(m)));
  c->closing = true;
  if (c->out.empty()) close_conn(c);
}

void Broker::protocol_error(Conn* c, const std::string& what) {
  uint32_t rank = c->rank;
  close_conn(c);
  listener_->on_protocol_error(rank, what);
}

void Broker::enqueue(Conn* c, std::shared_ptr<const std::string> frame) {
  if (c->closed) return;
  c->out.emplace_back(std::move(frame), 0);
  flush(c);
}

void Broker::flush(Conn* c) {
  while (!c->closed && !c->out.empty()) {
    auto& [frame, off] = c->out.front();
    ssize_t n =
        ::send(c->fd.get(), frame->data() + off, frame->size() - off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n < 0) {
      // EPIPE, ECONNRESET: the node is gone; its EOF tells the rest of the story.
      close_conn(c);
      return;
    }
    off += static_cast<size_t>(n);
    if (off == frame->size()) c->out.pop_front();
  }
  if (c->closing && c->out.empty()) close_conn(c);
}

void Broker::close_conn(Conn* c) {
  if (c->closed) return;
  c->closed = true;
  c->out.clear();
  c->fd.reset();
  if (c->rank == kNoRank) {
    --pending_;
    return;
  }
  by_rank_[c->rank] = nullptr;
  listener_->on_disconnect(c->rank, c->said_bye);
}

void Broker::broadcast(uint32_t except, std::shared_ptr<const std::string> frame) {
  failure_frame_ = frame;
  for (Conn* c : by_rank_)
    if (c != nullptr && c->rank != except && !c->said_bye) enqueue(c, frame);
}

void Broker::broadcast_peer_failed(uint32_t failed, const std::string& text, bool tell_failed) {
  boot::PeerFailed m;
  m.rank = failed;
  m.text = text;
  broadcast(tell_failed ? kNoRank : failed, std::make_shared<const std::string>(boot::encode(m)));
}

void Broker::broadcast_job_abort(uint32_t rank, const std::string& reason) {
  boot::JobAbort m;
  m.rank = rank;
  m.reason = reason;
  broadcast(rank, std::make_shared<const std::string>(boot::encode(m)));
}

}  // namespace loom::loomrun

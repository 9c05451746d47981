#include "comm/bootstrap/loomrun_client.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>

#include "base/log.h"
#include "comm/bootstrap/bootstrap_impl.h"
#include "comm/bootstrap/unique_fd.h"

namespace loom::comm::internal {
namespace {

using Clock = std::chrono::steady_clock;

// Longest ABORT reason sent; loomrun prints it on one line.
constexpr size_t kMaxReason = 4096;
constexpr size_t kReadChunk = 16 * 1024;

int ms_left(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

void signal_eventfd(int fd) {
  uint64_t one = 1;
  // note: an eventfd write fails only if the counter would overflow; it is readable then anyway.
  ssize_t n = ::write(fd, &one, sizeof one);
  (void)n;
}

void drain_eventfd(int fd) {
  uint64_t v;
  ssize_t n = ::read(fd, &v, sizeof v);  // non-blocking: EAGAIN when already drained
  (void)n;
}

// Writes all of `data` to the non-blocking socket `fd`. deadline == nullopt: no time limit.
Status write_all(int fd, std::string_view data, std::optional<Clock::time_point> deadline) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return Status::from_errno("send", errno);
    pollfd p{fd, POLLOUT, 0};
    int timeout = deadline ? ms_left(*deadline) : -1;
    int r = ::poll(&p, 1, timeout);
    if (r < 0 && errno != EINTR) return Status::from_errno("poll", errno);
    if (r == 0) return Status::timeout("loomrun did not read what this node sent");
  }
  return Status::ok();
}

// Connects a non-blocking socket to `addr`, retrying while loomrun's backlog is full.
Result<UniqueFd> connect_socket(const std::string& addr, Clock::time_point deadline) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (addr.empty() || addr.size() >= sizeof sa.sun_path)
    return Status::invalid_argument(
        fmt::format("LOOM_BOOT_ADDR '{}' is not a usable socket path", addr));
  std::memcpy(sa.sun_path, addr.data(), addr.size());
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status::from_errno("socket", errno);
  while (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    // note: a non-blocking Unix-socket connect completes at once or fails with EAGAIN when the
    // listener's backlog is full; it never returns EINPROGRESS.
    if (errno == EINTR) continue;
    if (errno != EAGAIN || ms_left(deadline) == 0)
      return Status::from_errno(fmt::format("cannot connect to loomrun at {}", addr), errno);
    ::poll(nullptr, 0, 10);
  }
  return fd;
}

// Waits for loomrun's answer to HELLO; any frames after it stay in *reader.
Result<uint32_t> await_ok(int fd, NodeId rank, boot::FrameReader* reader,
                          Clock::time_point deadline) {
  std::string buf(kReadChunk, '\0');
  while (true) {
    auto next = reader->next();
    if (!next) return Status::malformed("from loomrun: " + next.status().message());
    if (next->has_value()) {
      boot::Frame& f = **next;
      if (f.kind == boot::Kind::kRefuse) {
        boot::Refuse m;
        Status s = boot::decode(f, &m);
        if (!s) return Status::malformed("from loomrun: " + s.message());
        return Status::refused(fmt::format("loomrun refused node {}: {}", rank, m.reason));
      }
      boot::Ok m;
      Status s = boot::decode(f, &m);
      if (!s) return Status::malformed("from loomrun: " + s.message());
      if (rank >= m.size)
        return Status::malformed(
            fmt::format("loomrun accepted rank {} in a job of {} nodes", rank, m.size));
      return m.size;
    }
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, ms_left(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return Status::from_errno("poll", errno);
    if (r == 0)
      return Status::timeout(fmt::format("loomrun did not answer HELLO within {} s",
                                         LoomrunBootstrap::kHandshakeTimeoutMs / 1000));
    ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0)
      return Status::peer_failed("lost connection to loomrun: " + std::string(strerror(errno)));
    if (n == 0) return Status::peer_failed("loomrun closed the connection during HELLO");
    reader->append(std::string_view(buf.data(), static_cast<size_t>(n)));
  }
}

}  // namespace

Result<std::unique_ptr<LoomrunBootstrap>> LoomrunBootstrap::connect(const std::string& addr,
                                                                    const std::string& token,
                                                                    NodeId rank,
                                                                    uint32_t startup_bound_ms) {
  auto deadline = Clock::now() + std::chrono::milliseconds(kHandshakeTimeoutMs);
  auto sock = connect_socket(addr, deadline);
  if (!sock) return sock.status();

  boot::Hello hello;
  hello.token = token;
  hello.rank = rank;
  hello.pid = static_cast<uint32_t>(::getpid());
  hello.next_bound_ms = startup_bound_ms;
  Status s = write_all(sock->get(), boot::encode(hello), deadline);
  if (!s) return Status::peer_failed("sending HELLO to loomrun: " + s.message());

  boot::FrameReader reader;
  auto size = await_ok(sock->get(), rank, &reader, deadline);
  if (!size) return size.status();

  UniqueFd epoll_fd(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll_fd.valid()) return Status::from_errno("epoll_create1", errno);
  UniqueFd server_wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  UniqueFd waiter_wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!server_wake.valid() || !waiter_wake.valid()) return Status::from_errno("eventfd", errno);
  for (int fd : {sock->get(), server_wake.get()}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (::epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, fd, &ev) != 0)
      return Status::from_errno("epoll_ctl", errno);
  }
  return std::unique_ptr<LoomrunBootstrap>(
      new LoomrunBootstrap(sock->release(), epoll_fd.release(), server_wake.release(),
                           waiter_wake.release(), rank, *size, token, std::move(reader)));
}

LoomrunBootstrap::LoomrunBootstrap(int sock, int epoll_fd, int server_wake_fd, int waiter_wake_fd,
                                   NodeId rank, uint32_t size, std::string token,
                                   boot::FrameReader reader)
    : sock_(sock),
      epoll_fd_(epoll_fd),
      server_wake_fd_(server_wake_fd),
      waiter_wake_fd_(waiter_wake_fd),
      rank_(rank),
      size_(size),
      token_(std::move(token)),
      reader_(std::move(reader)) {
  // Frames that arrived right behind OK (a late joiner's PEER_FAILED) must reach the server
  // thread even though the socket may have nothing more to read.
  MutexLock lock(read_mu_);
  if (reader_.buffered() > 0) signal_eventfd(server_wake_fd_);
}

LoomrunBootstrap::~LoomrunBootstrap() {
  ::close(epoll_fd_);
  ::close(server_wake_fd_);
  ::close(waiter_wake_fd_);
  ::close(sock_);
}

void LoomrunBootstrap::fail_locked(Status s) {
  if (!failure_) failure_ = std::move(s);
  // Whoever did not read the frame learns about it: the server thread through event_fd(), a
  // waiting allgather() through its own eventfd.
  signal_eventfd(server_wake_fd_);
  if (waiting_) signal_eventfd(waiter_wake_fd_);
}

void LoomrunBootstrap::stop_reading_locked() {
  if (!reading_) return;
  reading_ = false;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, sock_, nullptr);
}

void LoomrunBootstrap::pump_locked() {
  bool eof = false;
  std::string error;
  if (reading_) {
    char buf[16 * 1024];
    // Reads until the socket is empty. Everything is buffered, so a partial frame waits here for
    // its remaining bytes and the call never blocks.
    while (true) {
      ssize_t n = ::recv(sock_, buf, sizeof buf, MSG_DONTWAIT);
      if (n > 0) {
        reader_.append(std::string_view(buf, static_cast<size_t>(n)));
        continue;
      }
      if (n == 0) {
        eof = true;
      } else if (errno == EINTR) {
        continue;
      } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
        error = std::strerror(errno);
      }
      break;
    }
  }
  // File complete frames before reporting EOF: a PEER_FAILED right before loomrun went away is
  // the better explanation.
  while (true) {
    auto next = reader_.next();
    if (!next) {
      fail_locked(Status::malformed("from loomrun: " + next.status().message()));
      stop_reading_locked();
      reader_ = boot::FrameReader();
      return;
    }
    if (!next->has_value()) break;
    dispatch_locked(std::move(**next));
  }
  if (eof || !error.empty()) {
    fail_locked(Status::peer_failed(error.empty() ? "lost connection to loomrun"
                                                  : "lost connection to loomrun: " + error));
    stop_reading_locked();
  }
}

void LoomrunBootstrap::dispatch_locked(boot::Frame frame) {
  switch (frame.kind) {
    case boot::Kind::kAllgatherResult: {
      boot::AllgatherResult m;
      Status s = boot::decode(frame, &m);
      if (s && m.blobs.size() != size_)
        s = Status::malformed(fmt::format("ALLGATHER_RESULT #{} has {} entries for {} nodes", m.seq,
                                          m.blobs.size(), size_));
      if (!s) {
        fail_locked(Status::malformed("from loomrun: " + s.message()));
        return;
      }
      results_[m.seq] = std::move(m.blobs);
      if (waiting_) signal_eventfd(waiter_wake_fd_);
      return;
    }
    case boot::Kind::kPeerFailed: {
      boot::PeerFailed m;
      Status s = boot::decode(frame, &m);
      fail_locked(s ? Status::peer_failed(m.text)
                    : Status::malformed("from loomrun: " + s.message()));
      return;
    }
    case boot::Kind::kJobAbort: {
      boot::JobAbort m;
      Status s = boot::decode(frame, &m);
      fail_locked(
          s ? Status::peer_failed(fmt::format("node {} aborted the job: {}", m.rank, m.reason))
            : Status::malformed("from loomrun: " + s.message()));
      return;
    }
    default:
      fail_locked(Status::malformed(fmt::format(
          "unexpected {} frame from loomrun", boot::kind_name(static_cast<uint16_t>(frame.kind)))));
      return;
  }
}

Status LoomrunBootstrap::handle_event() {
  MutexLock lock(read_mu_);
  pump_locked();
  // Drained after pumping: a failure filed above is returned now; one filed later by allgather()
  // signals the eventfd again, so the next call reports it.
  drain_eventfd(server_wake_fd_);
  return failure_ ? *failure_ : Status::ok();
}

Status LoomrunBootstrap::send(const std::string& frame, int timeout_ms) {
  std::optional<Clock::time_point> deadline;
  if (timeout_ms >= 0) deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  MutexLock lock(write_mu_);
  return write_all(sock_, frame, deadline);
}

Result<std::vector<std::string>> LoomrunBootstrap::allgather(std::string_view mine,
                                                             const Step& step) {
  if (!boot::fits_in_frame(boot::allgather_payload_size(mine.size(), step.what.size())))
    return Status::invalid_argument(fmt::format(
        "allgather contribution of {} bytes exceeds the bootstrap frame limit of {} bytes",
        mine.size(), boot::kMaxFrameSize));
  {
    MutexLock lock(read_mu_);
    if (failure_) return *failure_;
  }
  boot::Allgather msg;
  msg.seq = next_seq_++;
  msg.blob = std::string(mine);
  msg.step = step.kind;
  msg.next_bound_ms = static_cast<uint32_t>(std::clamp<int64_t>(step.next_ms, 0, UINT32_MAX));
  msg.what = std::string(step.what);
  Status s = send(boot::encode(msg), -1);
  // why: loomrun, which knows who is missing, names a node that does not reach a bounded step
  // (its bound runs from the node's previous step, which came before ours); this node's own
  // bound is a fallback for a launcher that stopped answering, so it allows a margin on top.
  std::optional<Clock::time_point> deadline;
  if (step.wait_ms > 0)
    deadline = Clock::now() +
               std::chrono::milliseconds(step.wait_ms + std::max<int64_t>(1000, step.wait_ms / 2));
  if (!s) {
    MutexLock lock(read_mu_);
    fail_locked(Status::peer_failed("lost connection to loomrun: " + s.message()));
    return *failure_;
  }
  while (true) {
    {
      MutexLock lock(read_mu_);
      pump_locked();
      auto it = results_.find(msg.seq);
      if (it != results_.end()) {
        std::vector<std::string> out = std::move(it->second);
        results_.erase(it);
        waiting_ = false;
        return out;
      }
      if (failure_) {
        waiting_ = false;
        return *failure_;
      }
      waiting_ = true;
    }
    // note: no lost wake-up. A frame that arrives after pump_locked() either makes the socket
    // readable or, if the server thread read it first, signals waiter_wake_fd_ (waiting_ is set).
    pollfd p[2] = {{sock_, POLLIN, 0}, {waiter_wake_fd_, POLLIN, 0}};
    int r = ::poll(p, 2, deadline ? ms_left(*deadline) : -1);
    if (r == 0 && deadline && Clock::now() >= *deadline) {
      MutexLock lock(read_mu_);
      waiting_ = false;
      return Status::timeout(fmt::format(
          "{} did not complete within {} ms: another node did not reach it, and loomrun did "
          "not say which",
          step.what, step.wait_ms));
    }
    if (r < 0 && errno != EINTR) {
      int err = errno;
      MutexLock lock(read_mu_);
      waiting_ = false;
      return Status::from_errno("poll", err);
    }
    drain_eventfd(waiter_wake_fd_);
  }
}

void LoomrunBootstrap::finish(int exit_code) {
  boot::Bye msg;
  msg.exit_code = exit_code;
  Status s = send(boot::encode(msg), kGoodbyeTimeoutMs);
  if (!s) LOOM_DEBUG("could not say BYE to loomrun: {}", s.to_string());
}

void LoomrunBootstrap::abort_job(std::string_view reason, NodeId culprit, int /*status*/) {
  boot::Abort msg;
  msg.reason = std::string(reason.substr(0, kMaxReason));
  msg.culprit = culprit;
  Status s = send(boot::encode(msg), kGoodbyeTimeoutMs);
  if (!s) LOOM_WARN("could not tell loomrun that this node aborts the job: {}", s.to_string());
}

Result<std::unique_ptr<Bootstrap>> make_loomrun_bootstrap(const Config& config) {
  const std::string& addr = config.get_string("BOOT_ADDR");
  if (addr.empty())
    return Status::invalid_argument(
        "LOOM_BOOTSTRAP=loomrun but LOOM_BOOT_ADDR is not set: start the program with loomrun");
  int64_t rank = config.get_int("RANK");
  if (rank < 0)
    return Status::invalid_argument(
        "LOOM_BOOT_ADDR is set but LOOM_RANK is not: start the "
        "program with loomrun");
  auto b =
      LoomrunBootstrap::connect(addr, config.get_string("JOB_TOKEN"), static_cast<NodeId>(rank),
                                static_cast<uint32_t>(config.get_int("STARTUP_TIMEOUT_MS")));
  if (!b) return b.status();
  return std::unique_ptr<Bootstrap>(std::move(*b));
}

}  // namespace loom::comm::internal

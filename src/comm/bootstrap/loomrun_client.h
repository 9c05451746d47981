// LoomrunBootstrap: a node's side of the loomrun bootstrap protocol (boot_wire.h).
//
// The node connects to loomrun's Unix socket (LOOM_BOOT_ADDR), says HELLO{token, rank, pid} and
// learns the job size from OK. Collectives go through loomrun: ALLGATHER{seq, blob} is answered
// by ALLGATHER_RESULT{seq, blobs} once every node contributed to `seq`. loomrun reports failures
// with PEER_FAILED / JOB_ABORT; a closed socket means loomrun itself is gone.
//
// Thread safety (see bootstrap.h): allgather()/barrier() run on one application thread at a time;
// handle_event() runs on the server thread concurrently with them; finish()/abort_job() may be
// called from any thread. Both threads read frames from the one socket: whoever holds read_mu_
// reads everything available and files it (results by sequence number, the first failure), so a
// frame is never lost whichever thread read it.
//   - A result read by handle_event() wakes a waiting allgather() through waiter_wake_fd_.
//   - A failure read by allgather() is returned by it *and* wakes the server thread through
//     server_wake_fd_ (part of event_fd()), so the next handle_event() reports it too.
// Failures are sticky: once one happened, every later handle_event() and collective returns it.
//
// handle_event() never blocks: reads are non-blocking and partial frames stay buffered.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "comm/bootstrap/boot_wire.h"
#include "comm/bootstrap/bootstrap.h"

namespace loom::comm::internal {

class LoomrunBootstrap final : public Bootstrap {
 public:
  // How long the node waits for loomrun to accept the connection and answer HELLO, and for
  // BYE/ABORT to be written. loomrun answers at once; this only bounds a wedged launcher.
  static constexpr int kHandshakeTimeoutMs = 30'000;
  static constexpr int kGoodbyeTimeoutMs = 5'000;

  // Connects and completes the HELLO handshake. Fails with Status::refused naming loomrun's
  // reason (wrong token, rank out of range or taken), or an I/O / timeout error naming `addr`.
  // `startup_bound_ms`: this node's first collective follows OK within it (HELLO tells loomrun).
  static Result<std::unique_ptr<LoomrunBootstrap>> connect(const std::string& addr,
                                                           const std::string& token, NodeId rank,
                                                           uint32_t startup_bound_ms = 0);
  ~LoomrunBootstrap() override;

  LoomrunBootstrap(const LoomrunBootstrap&) = delete;
  LoomrunBootstrap& operator=(const LoomrunBootstrap&) = delete;

  std::string_view name() const override { return "loomrun"; }
  NodeId rank() const override { return rank_; }
  uint32_t size() const override { return size_; }
  const std::string& job_token() const override { return token_; }

  using Bootstrap::allgather;
  Result<std::vector<std::string>> allgather(std::string_view mine, const Step& step) override;

  // An epoll descriptor over the socket and server_wake_fd_.
  int event_fd() const override { return epoll_fd_; }
  Status handle_event() override;

  void finish(int exit_code) override;
  void abort_job(std::string_view reason, NodeId culprit = boot::kNoRank, int status = 3) override;

 private:
  // Takes ownership of the descriptors.
  LoomrunBootstrap(int sock, int epoll_fd, int server_wake_fd, int waiter_wake_fd, NodeId rank,
                   uint32_t size, std::string token, boot::FrameReader reader);

  // Reads every byte available without blocking and files the complete frames.
  void pump_locked() REQUIRES(read_mu_);
  void dispatch_locked(boot::Frame frame) REQUIRES(read_mu_);
  // Keeps the first failure and wakes both threads' waits.
  void fail_locked(Status s) REQUIRES(read_mu_);
  // The socket is dead (EOF, error, garbage): stop polling it so event_fd() does not spin.
  void stop_reading_locked() REQUIRES(read_mu_);
  // Writes a whole frame; timeout_ms < 0 waits as long as loomrun keeps the socket open.
  Status send(const std::string& frame, int timeout_ms) EXCLUDES(write_mu_);

  // Constant after construction.
  const int sock_;
  const int epoll_fd_;
  const int server_wake_fd_;  // eventfd in epoll_fd_'s set: "handle_event() has news"
  const int waiter_wake_fd_;  // eventfd polled by a waiting allgather()
  const NodeId rank_;
  const uint32_t size_;
  const std::string token_;

  // Application thread only.
  uint64_t next_seq_ = 0;

  Mutex read_mu_;
  boot::FrameReader reader_ GUARDED_BY(read_mu_);
  std::map<uint64_t, std::vector<std::string>> results_ GUARDED_BY(read_mu_);
  std::optional<Status> failure_ GUARDED_BY(read_mu_);
  bool reading_ GUARDED_BY(read_mu_) = true;   // false once the socket is dead
  bool waiting_ GUARDED_BY(read_mu_) = false;  // an allgather() sleeps on waiter_wake_fd_

  // Serializes writers so frames never interleave. Never held together with read_mu_.
  Mutex write_mu_;
};

}  // namespace loom::comm::internal

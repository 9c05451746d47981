// Broker: loomrun's side of the bootstrap protocol (comm/bootstrap/boot_wire.h).
//
// Listens on a Unix socket in loomrun's private directory. A connection must first say
// HELLO{token, rank, pid}; the broker refuses (REFUSE{reason}, a warning line, then closes) a
// wrong token, a rank outside the job, or a rank that is already connected or has left. An
// accepted node gets OK{size}. Collectives: ALLGATHER{seq, blob} from every node makes
// ALLGATHER_RESULT{seq, blobs} for every node. A node's seq must count 0, 1, 2, ... (anything else
// is a protocol error), and every node's contribution to one seq must be for the same step
// (boot::Step; a node at a shutdown barrier while another is at an application collective has
// left the job early: on_collective_mismatch).
//
// Unidentified connections (no HELLO yet) cannot keep the nodes out: each must send its HELLO
// within kHelloWait and in at most kMaxHelloBytes, and when kMaxPending of them are open the
// oldest is closed to make room, so a node that connects always gets in.
//
// Bounds (docs/launcher.md, "Bounds"): a node owes loomrun its next frame within the bound its
// previous one announced (HELLO and bounded ALLGATHERs carry next_bound_ms; expect_hello() sets
// the one for HELLO). check_deadlines() reports a node that is late (on_overdue).
//
// The broker only reports what happened (BrokerListener); the Job decides what is a failure and
// asks the broker to tell the nodes (broadcast_*). It never blocks: sockets are non-blocking,
// partial frames are buffered, and frames to send wait in per-connection queues that are flushed
// when the socket is writable (a result shared by all nodes is stored once).
//
// Listener callbacks run inside Broker calls; they may call broadcast_*() and connected(). Those
// never free a connection (closed ones are freed by the next add_to()), though a failed write may
// mark one closed and report on_disconnect() from within them.
//
// Thread safety: one thread (loomrun's event loop).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/bootstrap/boot_wire.h"
#include "comm/bootstrap/unique_fd.h"
#include "loom/status.h"
#include "poll_set.h"

namespace loom::loomrun {

namespace boot = comm::boot;

inline constexpr uint32_t kNoRank = boot::kNoRank;

class BrokerListener {
 public:
  virtual ~BrokerListener() = default;
  virtual void on_hello(uint32_t rank, uint32_t pid) = 0;
  virtual void on_bye(uint32_t rank, int32_t exit_code) = 0;
  // `culprit`: the node whose failure `rank` found, or kNoRank.
  virtual void on_abort(uint32_t rank, const std::string& reason, uint32_t culprit) = 0;
  // The node's connection closed; `said_bye`: it sent BYE first.
  virtual void on_disconnect(uint32_t rank, bool said_bye) = 0;
  // The node sent something that breaks the protocol; its connection has been closed.
  virtual void on_protocol_error(uint32_t rank, const std::string& what) = 0;
  // Collective #seq can never complete: node `rank` left the job without joining it.
  virtual void on_collective_stuck(uint64_t seq, uint32_t rank) = 0;
  // Collective #seq's result would not fit in a frame.
  virtual void on_collective_too_large(uint64_t seq, size_t bytes) = 0;
  // Node `rank` joined collective #seq for another step than the others: it is the one to blame
  // (the node at a shutdown barrier while others are at an application collective, else the
  // later one). `text` says what each was at.
  virtual void on_collective_mismatch(uint64_t seq, uint32_t rank, const std::string& text) = 0;
  // Node `rank` did not send what it owed within its bound. `what`: "send HELLO", ...; `phase`:
  // "bootstrap", "set-up" or "shutdown".
  virtual void on_overdue(uint32_t rank, const std::string& what, uint32_t bound_ms) = 0;
};

class Broker {
 public:
  using Clock = std::chrono::steady_clock;
  // Unidentified (pre-HELLO) connections: beyond kMaxPending at once, the oldest one that has
  // said nothing for kSilentGrace is closed to make room (a node sends its HELLO right after it
  // connects); beyond kMaxPendingHard, the oldest silent one whatever its age. Each lives at
  // most kHelloWait and may send at most kMaxHelloBytes.
  static constexpr size_t kMaxPending = 64;
  static constexpr size_t kMaxPendingHard = 128;
  static constexpr std::chrono::milliseconds kSilentGrace{200};
  static constexpr std::chrono::milliseconds kHelloWait{5000};
  static constexpr size_t kMaxHelloBytes = 4096;

  static Result<std::unique_ptr<Broker>> listen(const std::string& path, uint32_t size,
                                                std::string token, BrokerListener* listener);

  // Adds the listening socket and every open connection to `ps`.
  void add_to(PollSet* ps);
  // Reads whatever node `rank`'s connection holds now; a node's BYE may still be queued in its
  // socket when loomrun learns that it exited.
  void drain(uint32_t rank);
  // The node's process is gone: it joins no further collective.
  void node_exited(uint32_t rank);
  // Sends PEER_FAILED{failed, text} to every connected node except those that said BYE (and
  // `failed`, unless `tell_failed`), and to any node that connects later.
  void broadcast_peer_failed(uint32_t failed, const std::string& text, bool tell_failed = false);
  // Likewise JOB_ABORT{rank, reason}.
  void broadcast_job_abort(uint32_t rank, const std::string& reason);
  bool connected(uint32_t rank) const { return by_rank_[rank] != nullptr; }

  // Node `rank` was started: it owes its HELLO within `bound_ms` (0: no bound).
  void expect_hello(uint32_t rank, uint32_t bound_ms);
  // The earliest deadline of a node's owed frame or of an unidentified connection.
  std::optional<Clock::time_point> next_deadline() const;
  // Reports nodes that are late (on_overdue, once each) and closes expired unidentified
  // connections.
  void check_deadlines(Clock::time_point now);

 private:
  struct Conn {
    UniqueFd fd;
    Clock::time_point accepted_at;
    boot::FrameReader reader;
    std::deque<std::pair<std::shared_ptr<const std::string>, size_t>> out;  // frame, offset
    uint32_t rank = kNoRank;  // set by an accepted HELLO
    uint32_t pid = 0;
    bool said_bye = false;
    bool closing = false;  // refused: read nothing more, close once `out` is flushed
    bool closed = false;   // waiting to be freed by the next add_to()
  };
  struct Round {
    std::vector<std::string> blobs;
    uint32_t count = 0;
    boot::Step step = boot::Step::kRun;  // the first contribution's
    std::string what;
    uint32_t first = kNoRank;  // the first contributor
  };
  // What node `rank` owes loomrun next, by when.
  struct Owed {
    std::optional<Clock::time_point> deadline;
    std::string what;
    uint32_t bound_ms = 0;
    // Set by the node's last ALLGATHER: what it owes after the collective's result.
    uint32_t next_bound_ms = 0;
    std::string next_what;
  };

  Broker(UniqueFd listen_fd, uint32_t size, std::string token, BrokerListener* listener);
  void accept_all();
  void on_conn_event(Conn* c, short revents);
  void read_from(Conn* c);
  void handle_frame(Conn* c, boot::Frame f);
  void handle_hello(Conn* c, const boot::Frame& f);
  void handle_allgather(Conn* c, const boot::Frame& f);
  void complete_round(uint64_t seq);
  // Reports every open collective that departed node `rank` can no longer join.
  void check_departed(uint32_t rank);
  void refuse(Conn* c, const std::string& who, const std::string& reason);
  void protocol_error(Conn* c, const std::string& what);
  void enqueue(Conn* c, std::shared_ptr<const std::string> frame);
  void flush(Conn* c);
  void close_conn(Conn* c);
  void owe(uint32_t rank, std::string what, uint32_t bound_ms);
  void broadcast(uint32_t except, std::shared_ptr<const std::string> frame);

  const UniqueFd listen_fd_;
  const uint32_t size_;
  const std::string token_;
  BrokerListener* const listener_;

  std::vector<std::unique_ptr<Conn>> conns_;
  std::vector<Conn*> by_rank_;
  std::vector<uint64_t> next_seq_;  // per rank: the seq its next ALLGATHER must carry
  std::vector<bool> departed_;      // per rank: said BYE or exited
  std::vector<Owed> owed_;          // per rank
  std::map<uint64_t, Round> rounds_;
  std::shared_ptr<const std::string> failure_frame_;  // for nodes that connect after a failure
  size_t pending_ = 0;                                // connections without an accepted HELLO
  bool warned_pending_ = false;
};

}  // namespace loom::loomrun

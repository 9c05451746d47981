// Job: runs N node processes to their end.
//
// One poll() loop over the signalfd (SIGCHLD, SIGINT, SIGTERM, SIGHUP), the broker's sockets and
// the nodes' output pipes, with a timeout computed from the nearest deadline. Lifecycle:
//
//   running   --(node fails | node sends ABORT | --timeout | signal)-->   stopping
//   stopping: on a failure or ABORT the other nodes get PEER_FAILED / JOB_ABORT (nodes that
//             connect later get it at once) and exit by themselves; on --timeout they get SIGTERM,
//             on a signal that signal. After the kill grace the rest get SIGKILL; kReapWait later
//             loomrun stops waiting.
//
// A node fails when it exits non-zero, is killed by a signal, breaks the protocol, or its
// bootstrap connection closes without BYE (loomrun waits kDisconnectWait for its exit status, to
// name the real cause). Only the first failure is printed and decides the exit status.
//
// Every wait is bounded: the loop ends when every node is reaped, at most
// kill_grace + kReapWait after the job began stopping; output is drained for at most
// kOutputDrainWait after that.
//
// Thread safety: one thread. Not reusable: run() once.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "broker.h"
#include "options.h"
#include "output.h"
#include "stdin_relay.h"
#include "sys.h"

namespace loom::loomrun {

class Job final : public BrokerListener {
 public:
  static constexpr std::chrono::milliseconds kDisconnectWait{1000};
  static constexpr std::chrono::milliseconds kReapWait{5000};
  static constexpr std::chrono::milliseconds kOutputDrainWait{1000};

  // `dir` is loomrun's private directory (socket, statistics files).
  Job(const Options& options, std::string program_path, std::string dir, SignalFd* signals,
      const ChildSetup& child_setup);
  // Kills and reaps any node still running (only if run() returned early).
  ~Job() override;

  // Returns loomrun's exit status: 0, the first failing node's status, 124 on timeout, 128+sig
  // when loomrun was signalled, 1 if loomrun itself could not run the job.
  int run();

  // Why the job stopped before its end ("timeout after 5 s", ...); empty if it ended normally.
  const std::string& stopped() const { return stopped_text_; }

  // Where --stats-json nodes write ("%r" is the rank).
  static std::string stats_pattern(const std::string& dir);

  // BrokerListener.
  void on_hello(uint32_t rank, uint32_t pid) override;
  void on_bye(uint32_t rank, int32_t exit_code) override;
  void on_abort(uint32_t rank, const std::string& reason, uint32_t culprit) override;
  void on_disconnect(uint32_t rank, bool said_bye) override;
  void on_protocol_error(uint32_t rank, const std::string& what) override;
  void on_collective_stuck(uint64_t seq, uint32_t rank) override;
  void on_collective_too_large(uint64_t seq, size_t bytes) override;
  void on_collective_mismatch(uint64_t seq, uint32_t rank, const std::string& text) override;
  void on_overdue(uint32_t rank, const std::string& what, uint32_t bound_ms) override;

 private:
  using Clock = std::chrono::steady_clock;
  using TimePoint = Clock::time_point;

  enum class Stop { kNone, kFailure, kTimeout, kSignal, kInternal };

  struct Node {
    pid_t pid = -1;
    bool started = false;
    bool reaped = false;
    bool abandoned = false;  // did not exit even after SIGKILL
    int wait_status = 0;
    bool connected = false;       // has an open, accepted bootstrap connection
    bool ever_connected = false;  // said HELLO at some point
    bool said_bye = false;
    std::optional<TimePoint> disconnect_deadline;  // closed without BYE; waiting for its exit
  };

  std::vector<std::string> base_env(const std::string& token) const;
  void start_nodes(const std::string& token);
  void on_signals();
  void reap();
  void on_node_exit(uint32_t rank, int wait_status);
  void check_deadlines(TimePoint now);
  int next_timeout_ms(TimePoint now) const;
  bool begin_stop(Stop why);
  // `stop_it`: the failed node still runs but is of no further use (hung, broke the protocol):
  // it gets SIGTERM; otherwise it is told like the others and exits by itself.
  void node_failed(uint32_t rank, const std::string& text, std::optional<int> status,
                   bool stop_it = true);
  // Sends `sig` to the process group of every running node for which `pick` is true.
  template <typename Pred>
  void signal_nodes(int sig, Pred pick);
  void kill_remaining();
  void drain_output();
  bool all_done() const;
  int exit_status() const;
  std::string who(uint32_t rank) const;

  const Options& options_;
  const std::string program_path_;
  const std::string dir_;
  SignalFd* const signals_;
  const ChildSetup child_setup_;

  std::vector<Node> nodes_;
  std::unordered_map<pid_t, uint32_t> rank_of_pid_;
  std::unique_ptr<Broker> broker_;
  OutputForwarder output_;
  std::optional<StdinRelay> stdin_;  // when a node reads loomrun's stdin

  Stop stop_ = Stop::kNone;
  uint32_t failed_rank_ = kNoRank;
  std::optional<int> failed_status_;  // nullopt: take it from the failed node's exit (ABORT)
  int stop_signal_ = 0;
  std::string stopped_text_;
  std::optional<TimePoint> timeout_deadline_;
  std::optional<TimePoint> kill_deadline_;
  std::optional<TimePoint> reap_deadline_;
};

}  // namespace loom::loomrun

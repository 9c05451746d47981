#include "job.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <thread>

#include "comm/bootstrap/boot_wire.h"
#include "spawn.h"

extern char** environ;

namespace loom::loomrun {
namespace {

constexpr char kSocketName[] = "boot.sock";

bool has_prefix(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

std::string seconds(double s) { return fmt::format("{:g}", s); }

}  // namespace

Job::Job(const Options& options, std::string program_path, std::string dir, SignalFd* signals,
         const ChildSetup& child_setup)
    : options_(options),
      program_path_(std::move(program_path)),
      dir_(std::move(dir)),
      signals_(signals),
      child_setup_(child_setup),
      nodes_(options.nodes),
      output_(options.tag_output) {}

Job::~Job() {
  // Only reached with live nodes if run() bailed out early: never leave processes behind.
  bool any = false;
  for (const Node& n : nodes_) {
    if (!n.started || n.reaped || n.abandoned) continue;
    ::kill(-n.pid, SIGKILL);
    any = true;
  }
  if (!any) return;
  auto deadline = Clock::now() + kReapWait;
  for (Node& n : nodes_) {
    if (!n.started || n.reaped || n.abandoned) continue;
    while (::waitpid(n.pid, nullptr, WNOHANG) == 0 && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::string Job::stats_pattern(const std::string& dir) { return dir + "/stats.%r.json"; }

std::string Job::who(uint32_t rank) const {
  return fmt::format("node {} (pid {})", rank, nodes_[rank].pid);
}

std::vector<std::string> Job::base_env(const std::string& token) const {
  std::vector<std::string> env;
  auto overridden = [&](std::string_view name) {
    return name == "LOOM_BOOT_ADDR" || name == "LOOM_JOB_TOKEN" || name == "LOOM_RANK" ||
           name == "LOOM_SIZE" || (name == "LOOM_STATS_JSON" && !options_.stats_json.empty()) ||
           options_.settings.count(std::string(name)) > 0;
  };
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view kv(*e);
    if (has_prefix(kv, "LOOM_") && overridden(kv.substr(0, kv.find('=')))) continue;
    env.emplace_back(kv);
  }
  for (const auto& [name, value] : options_.settings) env.push_back(name + "=" + value);
  if (!options_.stats_json.empty()) env.push_back("LOOM_STATS_JSON=" + stats_pattern(dir_));
  env.push_back(fmt::format("LOOM_BOOT_ADDR={}/{}", dir_, kSocketName));
  env.push_back("LOOM_JOB_TOKEN=" + token);
  env.push_back(fmt::format("LOOM_SIZE={}", options_.nodes));
  return env;
}

void Job::start_nodes(const std::string& token) {
  UniqueFd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  SpawnSpec spec;
  spec.path = program_path_;
  spec.argv = options_.command;
  spec.setup = child_setup_;
  if (options_.stdin_rank != kNoStdin) {
    auto relay = StdinRelay::create();
    if (relay) {
      stdin_ = std::move(*relay);
    } else {
      warn("cannot pass stdin on, the nodes read /dev/null: " + relay.status().message());
    }
  }
  std::vector<std::string> env = base_env(token);
  env.emplace_back();  // LOOM_RANK, set per node
  auto startup_bound_ms = static_cast<uint32_t>(node_setting_int(options_, "STARTUP_TIMEOUT_MS"));
  // note: a job with more nodes than CPUs (or one node) is left to the scheduler: cpu_shares()
  // is empty then.
  const std::vector<cpu_set_t> shares = options_.bind == Bind::kAuto
                                            ? cpu_shares(options_.nodes, usable_cpus())
                                            : std::vector<cpu_set_t>();
  for (uint32_t r = 0; r < options_.nodes; ++r) {
    env.back() = fmt::format("LOOM_RANK={}", r);
    spec.env = env;
    spec.cpus = shares.empty() ? nullptr : &shares[r];
    spec.stdin_fd = stdin_ && r == options_.stdin_rank ? stdin_->child_fd() : dev_null.get();
    auto spawned = spawn_node(spec);
    if (stdin_ && r == options_.stdin_rank) stdin_->close_child_end();
    if (!spawned) {
      // The nodes already started are told like any failure; the rest never start.
      node_failed(r, fmt::format("cannot start node {}: {}", r, spawned.status().message()), 1);
      return;
    }
    Node& n = nodes_[r];
    n.pid = spawned->pid;
    n.started = true;
    rank_of_pid_[n.pid] = r;
    broker_->expect_hello(r, startup_bound_ms);
    output_.add(r, std::move(spawned->out), std::move(spawned->err));
  }
}

int Job::run() {
  auto token = boot::random_token();
  if (!token) {
    say(token.status().message());
    return 1;
  }
  auto broker = Broker::listen(dir_ + "/" + kSocketName, options_.nodes, *token, this);
  if (!broker) {
    say("cannot create the bootstrap socket: " + broker.status().message());
    return 1;
  }
  broker_ = std::move(*broker);

  start_nodes(*token);
  if (options_.timeout_s > 0)
    timeout_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(options_.timeout_s));

  while (!all_done()) {
    PollSet ps;
    ps.add(signals_->fd(), POLLIN, [this](short) { on_signals(); });
    broker_->add_to(&ps);
    output_.add_to(&ps);
    if (stdin_) stdin_->add_to(&ps);
    Status s = ps.wait(next_timeout_ms(Clock::now()));
    if (!s) {
      say("internal error: " + s.message());
      stop_ = Stop::kInternal;
      return 1;  // ~Job kills and reaps the nodes
    }
    check_deadlines(Clock::now());
  }
  drain_output();
  return exit_status();
}

bool Job::all_done() const {
  for (const Node& n : nodes_)
    if (n.started && !n.reaped && !n.abandoned) return false;
  return true;
}

int Job::exit_status() const {
  switch (stop_) {
    case Stop::kNone:
      return 0;
    case Stop::kTimeout:
      return 124;
    case Stop::kSignal:
      return 128 + stop_signal_;
    case Stop::kInternal:
      return 1;
    case Stop::kFailure: {
      if (failed_status_) return *failed_status_;
      // ABORT: the aborting node's own exit status, if it is one.
      if (failed_rank_ != kNoRank && nodes_[failed_rank_].reaped) {
        int st = exit_status_of(nodes_[failed_rank_].wait_status);
        if (st != 0) return st;
      }
      return 1;
    }
  }
  return 1;
}

int Job::next_timeout_ms(TimePoint now) const {
  std::optional<TimePoint> next;
  auto consider = [&](const std::optional<TimePoint>& t) {
    if (t && (!next || *t < *next)) next = t;
  };
  if (stop_ == Stop::kNone) consider(timeout_deadline_);
  consider(kill_deadline_);
  consider(reap_deadline_);
  for (const Node& n : nodes_)
    if (!n.reaped) consider(n.disconnect_deadline);
  if (stop_ == Stop::kNone) consider(broker_->next_deadline());
  if (!next) return -1;
  if (*next <= now) return 0;
  // Rounded up, so the loop does not spin through the last fraction of a millisecond.
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(*next - now).count();
  return static_cast<int>(std::min<int64_t>((us + 999) / 1000, 24 * 3600 * 1000));
}

void Job::check_deadlines(TimePoint now) {
  if (stop_ == Stop::kNone && timeout_deadline_ && now >= *timeout_deadline_) {
    stopped_text_ = fmt::format("timeout after {} s", seconds(options_.timeout_s));
    say(stopped_text_);
    begin_stop(Stop::kTimeout);
    signal_nodes(SIGTERM, [](const Node&) { return true; });
  }
  if (stop_ == Stop::kNone) broker_->check_deadlines(now);
  for (uint32_t r = 0; r < nodes_.size(); ++r) {
    Node& n = nodes_[r];
    if (!n.disconnect_deadline || now < *n.disconnect_deadline) continue;
    n.disconnect_deadline.reset();
    if (!n.reaped)
      node_failed(r, who(r) + " closed its connection to loomrun without saying goodbye", 1);
  }
  if (kill_deadline_ && now >= *kill_deadline_) {
    kill_deadline_.reset();
    kill_remaining();
  }
  if (reap_deadline_ && now >= *reap_deadline_) {
    reap_deadline_.reset();
    for (uint32_t r = 0; r < nodes_.size(); ++r) {
      Node& n = nodes_[r];
      if (!n.started || n.reaped) continue;
      warn(who(r) + " did not exit after SIGKILL; not waiting for it any longer");
      n.abandoned = true;
    }
  }
}

bool Job::begin_stop(Stop why) {
  if (stop_ != Stop::kNone) return false;
  stop_ = why;
  kill_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(options_.kill_grace_s));
  return true;
}

template <typename Pred>
void Job::signal_nodes(int sig, Pred pick) {
  for (const Node& n : nodes_)
    if (n.started && !n.reaped && pick(n)) ::kill(-n.pid, sig);
}

void Job::kill_remaining() {
  int left = 0;
  for (const Node& n : nodes_) left += n.started && !n.reaped;
  if (left == 0) return;
  say(fmt::format("killing {} node{} still running {} s after the job began to stop", left,
                  left == 1 ? "" : "s", seconds(options_.kill_grace_s)));
  signal_nodes(SIGKILL, [](const Node&) { return true; });
  reap_deadline_ = Clock::now() + kReapWait;
}

void Job::node_failed(uint32_t rank, const std::string& text, std::optional<int> status,
                      bool stop_it) {
  if (!begin_stop(Stop::kFailure)) return;
  failed_rank_ = rank;
  failed_status_ = status;
  stopped_text_ = text;
  say(text);
  // Nodes still starting up get the notice when they connect (Broker keeps it for them); nodes
  // that never connect are killed when the grace period ends.
  broker_->broadcast_peer_failed(rank, text, /*tell_failed=*/!stop_it);
  // A failed node that still runs (broke the protocol, hung up) is of no further use.
  if (rank != kNoRank && stop_it) {
    const Node* failed = &nodes_[rank];
    signal_nodes(SIGTERM, [&](const Node& n) { return &n == failed; });
  }
}

void Job::on_signals() {
  for (int sig : signals_->read()) {
    if (sig == SIGCHLD) {
      reap();
      continue;
    }
    if (stop_ == Stop::kNone) {
      stopped_text_ = fmt::format("loomrun caught {}", signal_name(sig));
      say(fmt::format("caught {}; stopping the job", signal_name(sig)));
      begin_stop(Stop::kSignal);
      stop_signal_ = sig;
      signal_nodes(sig, [](const Node&) { return true; });
    } else if (kill_deadline_) {
      // Asked again while stopping: do not wait for the grace period.
      say(fmt::format("caught {} again; killing the job", signal_name(sig)));
      kill_deadline_.reset();
      kill_remaining();
    }
  }
}

void Job::reap() {
  std::vector<std::pair<uint32_t, int>> exited;
  while (true) {
    int st = 0;
    pid_t pid = ::waitpid(-1, &st, WNOHANG);
    if (pid < 0 && errno == EINTR) continue;
    if (pid <= 0) break;
    auto it = rank_of_pid_.find(pid);
    if (it != rank_of_pid_.end()) exited.emplace_back(it->second, st);
  }
  // Of nodes that died together, the one killed by a signal is the likeliest cause (the others
  // may have failed because of it); then a non-zero exit.
  auto rank_of = [](int st) { return WIFSIGNALED(st) ? 0 : (st != 0 ? 1 : 2); };
  std::stable_sort(exited.begin(), exited.end(), [&](const auto& a, const auto& b) {
    return rank_of(a.second) < rank_of(b.second);
  });
  for (const auto& [rank, st] : exited) on_node_exit(rank, st);
}

void Job::on_node_exit(uint32_t rank, int st) {
  Node& n = nodes_[rank];
  n.reaped = true;
  n.wait_status = st;
  n.disconnect_deadline.reset();
  // note: the group id cannot be reused while helpers of the node are still in it.
  if (stop_ != Stop::kNone) ::kill(-n.pid, SIGKILL);
  broker_->drain(rank);  // a BYE or ABORT may still sit in its socket
  if (stop_ == Stop::kNone) {
    if (st != 0)
      node_failed(rank, who(rank) + " " + describe_wait_status(st), exit_status_of(st));
    else if (n.ever_connected && !n.said_bye)
      node_failed(rank,
                  who(rank) +
                      " exited with status 0 without saying goodbye to loomrun (its "
                      "bootstrap connection closed without BYE)",
                  1);
  }
  broker_->node_exited(rank);
}

void Job::drain_output() {
  auto deadline = Clock::now() + kOutputDrainWait;
  while (!output_.all_closed()) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;  // a helper process still holds a pipe open
    PollSet ps;
    output_.add_to(&ps);
    if (!ps.wait(static_cast<int>(left.count()))) break;
  }
  output_.close_all();
}

void Job::on_hello(uint32_t rank, uint32_t /*pid*/) {
  nodes_[rank].connected = true;
  nodes_[rank].ever_connected = true;
}

void Job::on_bye(uint32_t rank, int32_t /*exit_code*/) { nodes_[rank].said_bye = true; }

void Job::on_abort(uint32_t rank, const std::string& reason, uint32_t culprit) {
  if (!begin_stop(Stop::kFailure)) return;
  // The node that failed decides the status: the one the aborting node found failed (its
  // status once it has exited: killed, or exited because the job stops), else the aborting one.
  failed_rank_ = culprit != kNoRank ? culprit : rank;
  failed_status_.reset();
  stopped_text_ = culprit != kNoRank ? fmt::format("{} aborted the job because of {}: {}",
                                                   who(rank), who(culprit), reason)
                                     : fmt::format("{} aborted the job: {}", who(rank), reason);
  say(stopped_text_);
  broker_->broadcast_job_abort(rank, reason);
}

void Job::on_disconnect(uint32_t rank, bool said_bye) {
  Node& n = nodes_[rank];
  n.connected = false;
  if (!said_bye && !n.reaped && stop_ == Stop::kNone)
    n.disconnect_deadline = Clock::now() + kDisconnectWait;
}

void Job::on_protocol_error(uint32_t rank, const std::string& what) {
  node_failed(rank, fmt::format("{} broke the bootstrap protocol: {}", who(rank), what), 1);
}

void Job::on_collective_stuck(uint64_t seq, uint32_t rank) {
  node_failed(rank,
              fmt::format("{} left the job without joining collective #{}, which cannot complete",
                          who(rank), seq),
              1);
}

void Job::on_collective_mismatch(uint64_t /*seq*/, uint32_t rank, const std::string& text) {
  // The node is healthy, only out of step: it is told like the others and exits by itself.
  node_failed(rank, fmt::format("{} left the job's collectives: {}", who(rank), text), std::nullopt,
              /*stop_it=*/false);
}

void Job::on_overdue(uint32_t rank, const std::string& what, uint32_t bound_ms) {
  node_failed(
      rank,
      fmt::format("{} did not {} within {} ms; it is stopped or hung", who(rank), what, bound_ms),
      std::nullopt);
}

void Job::on_collective_too_large(uint64_t seq, size_t bytes) {
  node_failed(kNoRank,
              fmt::format("collective #{} would return {} bytes, more than the bootstrap frame "
                          "limit of {} bytes",
                          seq, bytes, boot::kMaxFrameSize),
              1);
}

}  // namespace loom::loomrun

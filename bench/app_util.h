// Helpers shared by the application benchmarks (sor, heat, mandelbrot): timing and the command-line
// conventions of a program that every node of a loomrun job starts with the same arguments.
#pragma once

#include <CLI/CLI.hpp>

#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"

#ifndef LOOM_BENCH_NO_DSM
#include "base/config.h"
#include "loom/loom.hpp"
#endif

namespace loom::bench {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Reports a parse error (or prints the help) once for the whole job and returns the exit status.
inline int exit_for(const CLI::App& app, const CLI::ParseError& e, const char* name) {
  if (e.get_exit_code() != 0) return usage_error(name, e.what(), "see --help");
  if (is_node0()) app.exit(e);  // --help
  return 0;
}

// Messages a node sent (and their payload bytes) over the timed parts of a run.
struct Sent {
  uint64_t messages = 0, bytes = 0;
};

// What this node sends during a timed section: the node's first thread (`on`) reads the
// counters (a function returning Sent, e.g. node_counters) at start() and adds the difference to
// *sent at stop(); the other threads do nothing.
template <typename Counters>
class SentMeter {
 public:
  SentMeter(bool on, Counters counters) : on_(on), counters_(counters) {}
  void start() {
    if (on_) before_ = counters_();
  }
  void stop(Sent* sent) {
    if (!on_) return;
    const Sent after = counters_();
    sent->messages += after.messages - before_.messages;
    sent->bytes += after.bytes - before_.bytes;
  }

 private:
  bool on_;
  Counters counters_;
  Sent before_;
};

// The options of every benchmark that runs `--mode seq` or `--mode loom` (mandelbrot, tsp, is,
// ep): --mode, --threads (per node), --reps, --json, into the fields of the same names.
template <typename Args>
void add_run_options(CLI::App* app, Args* args) {
  app->add_option("--mode", args->mode, "seq or loom")->check(CLI::IsMember({"seq", "loom"}));
  app->add_option("--threads", args->threads, "threads per node (loom mode)")
      ->check(CLI::Range(1, 1024));
  app->add_option("--reps", args->reps, "repetitions; the time is their median")
      ->check(CLI::Range(1, 100000));
  app->add_flag("--json", args->json, "one JSON object on one line");
}

// After parsing: seq mode runs one thread, and a build without Loom has no loom mode.
template <typename Args>
void check_run_options(const Args& args) {
  if (args.mode == "seq" && args.threads != 1)
    throw CLI::ValidationError("--threads", "seq mode runs one thread");
#ifdef LOOM_BENCH_NO_DSM
  if (args.mode == "loom")
    throw CLI::ValidationError("--mode", "this build has no loom mode (LOOM_BENCH_NO_DSM)");
#endif
}

// The common main() of the benchmarks that run `--mode seq` or `--mode loom` and print one
// result on node 0 (mandelbrot, tsp): parses the command line (`parse(argc, argv, &args, &app)`
// throws CLI errors), runs `seq(args)` or `loom(args, &argc, &argv)` (a LoomResult), prints
// `print(args, nodes, protocol, report)` and returns `status(report)` (0, or 1 after a FAILED
// line). `protocol` is "none" in seq mode.
template <typename Args, typename Report, typename Parse, typename Seq, typename Loom,
          typename Print, typename Status>
int bench_main(int argc, char** argv, const char* name, const char* about, Parse parse, Seq seq,
               Loom loom, Print print, Status status);

// How the threads of a mode wait for each other (the computation is a template over these).
struct NoSync {
  void wait() {}
};
struct StdSync {
  std::barrier<>* b;
  void wait() { b->arrive_and_wait(); }
};
#ifndef LOOM_BENCH_NO_DSM
struct LoomSync {
  loom::barrier b;
  void wait() { b.wait(); }
};

// This node's messages sent so far, and their payload bytes (loom::stats_json()).
inline Sent node_counters() {
  const nlohmann::json j = nlohmann::json::parse(loom::stats_json());
  const nlohmann::json& total = j.at("messages").at("total");
  return {total.at("sent_msgs").get<uint64_t>(), total.at("sent_bytes").get<uint64_t>()};
}

// The job's default protocol (loomrun --protocol / LOOM_PROTOCOL), which allocations that name
// none use.
inline std::string job_protocol() {
  const char* env = std::getenv("LOOM_PROTOCOL");
  if (env != nullptr && *env != '\0') return env;
  return find_config_row("PROTOCOL")->default_value;
}

// Collective (one thread of every node): every node's `mine` goes into `all` (shared memory, one
// per node); node 0 gets their sum divided by `reps` (a mean per repetition), the others zeros.
// Orders memory like a barrier (loom::broadcast_ptr).
inline Sent sum_sent(const Sent& mine, Sent* all, int node, int nodes, int reps) {
  all[node] = mine;
  (void)loom::broadcast_ptr(all, 0);
  Sent total;
  if (node != 0) return total;
  for (int n = 0; n < nodes; ++n) {
    total.messages += all[n].messages;
    total.bytes += all[n].bytes;
  }
  total.messages /= static_cast<uint64_t>(reps);
  total.bytes /= static_cast<uint64_t>(reps);
  return total;
}

// What run_loom() of a benchmark returns on every node; only node 0 prints `report`.
template <typename Report>
struct LoomResult {
  Report report;
  int nodes = 0;
  bool node0 = false;
};

// This node's place in a loomrun job whose every node runs `threads_per_node` threads.
struct LoomJob {
  int node = 0;
  int nodes = 0;
  size_t threads_per_node = 0;
  size_t threads = 0;  // in the whole job (P)
};

// Calls loom::init and says where this node stands.
inline LoomJob start_loom_job(int threads_per_node, int* argc, char*** argv) {
  loom::init(argc, argv);
  LoomJob job;
  job.node = loom::node_id();
  job.nodes = loom::num_nodes();
  job.threads_per_node = static_cast<size_t>(threads_per_node);
  job.threads = job.threads_per_node * static_cast<size_t>(job.nodes);
  return job;
}

// Runs body(g, t) on each of this node's threads and waits for them all: `t` is the thread's index
// on the node, `g` = node * threads_per_node + t its index in the job.
template <typename Body>
void run_node_threads(const LoomJob& job, const Body& body) {
  std::vector<std::thread> threads;
  for (size_t t = 0; t < job.threads_per_node; ++t) {
    const size_t g = static_cast<size_t>(job.node) * job.threads_per_node + t;
    threads.emplace_back([&body, g, t] { body(g, t); });
  }
  for (std::thread& thread : threads) thread.join();
}
#endif

template <typename Args, typename Report, typename Parse, typename Seq, typename Loom,
          typename Print, typename Status>
int bench_main(int argc, char** argv, const char* name, const char* about, Parse parse, Seq seq,
               Loom loom, Print print, Status status) {
  Args args;
  CLI::App app(about, name);
  try {
    parse(argc, argv, &args, &app);
  } catch (const CLI::ParseError& e) {
    return exit_for(app, e, name);
  }
  Report report;
  int nodes = 1;
  std::string protocol = "none";
  if (args.mode == "seq") {
    report = seq(args);
  } else {
#ifndef LOOM_BENCH_NO_DSM
    LoomResult<Report> r = loom(args, &argc, &argv);
    if (!r.node0) return 0;
    report = std::move(r.report);
    nodes = r.nodes;
    protocol = job_protocol();
#else
    (void)loom;
#endif
  }
  print(args, nodes, protocol, report);
  return status(report);
}

}  // namespace loom::bench

#include "runtime/runtime.h"

#include <fmt/format.h>
#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "base/log.h"
#include "loom/loom.h"
#include "loom/loom.hpp"

namespace loom::runtime {
namespace {

std::unique_ptr<Runtime> g_runtime;

log::Level parse_level(const std::string& s) {
  if (s == "error") return log::Level::kError;
  if (s == "info") return log::Level::kInfo;
  if (s == "debug") return log::Level::kDebug;
  return log::Level::kWarn;
}

}  // namespace

std::unique_ptr<Runtime> Runtime::start() {
  std::unique_ptr<Runtime> rt(new Runtime());
  Result<Config> config = Config::from_env();
  if (!config) log::die(kExitConfig, config.status().message());
  rt->config_ = std::move(*config);
  log::set_level(parse_level(rt->config_.get_string("LOG_LEVEL")));
  if (rt->config_.get_bool("MALLOC_TUNING")) {
    // why: every rendezvous message lands in a fresh buffer. With glibc's defaults a 1 MiB buffer
    // is mmapped (or trimmed back to the kernel) and freed each time, so each message faults its
    // pages in again: 1 MiB streams ran at 0.12-0.31x raw UCX, and at 0.93x with these settings
    // (bench/RESULTS.md). The cost is that up to 1 GiB of freed heap stays with the process.
    mallopt(M_MMAP_THRESHOLD, 4 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
  }
  int64_t hb = rt->config_.get_int("HEARTBEAT_MS"),
          timeout = rt->config_.get_int("PEER_TIMEOUT_MS");
  if (timeout < 2 * hb)
    log::die(kExitConfig,
             fmt::format("LOOM_PEER_TIMEOUT_MS={} must be at least twice LOOM_HEARTBEAT_MS={}, or "
                         "healthy peers would be declared failed",
                         timeout, hb));

  Result<std::unique_ptr<comm::Bootstrap>> boot = comm::make_bootstrap(rt->config_);
  if (!boot) log::die(kExitJobFailed, "cannot join the job: " + boot.status().to_string());
  rt->bootstrap_ = std::move(*boot);
  log::set_rank(static_cast<int>(rt->bootstrap_->rank()));

  comm::UcxTransport::Options topts;
  topts.tls = rt->config_.get_string("TRANSPORTS");
  topts.net_devices = rt->config_.get_string("NET_DEVICES");
  topts.err_handling = rt->config_.get_bool("UCX_ERR_HANDLING");
  Result<std::unique_ptr<comm::UcxTransport>> transport = comm::UcxTransport::create(topts);
  if (!transport) {
    rt->bootstrap_->abort_job(transport.status().to_string());
    log::die(kExitJobFailed, "cannot start the network: " + transport.status().to_string());
  }
  rt->transport_ = std::move(*transport);

  Result<std::vector<std::string>> addresses =
      rt->bootstrap_->allgather(rt->transport_->local_address());
  if (!addresses)
    log::die(kExitJobFailed, "address exchange failed: " + addresses.status().to_string());
  if (Status s = rt->transport_->connect(rt->bootstrap_->rank(), *addresses); !s) {
    rt->bootstrap_->abort_job(s.to_string());
    log::die(kExitJobFailed, s.to_string());
  }

  uint16_t tag = comm::job_tag_of(rt->bootstrap_->job_token());
  rt->comm_ = std::make_unique<comm::Comm>(*rt->transport_,
                                           comm::CommOptions::from_config(rt->config_, tag));
  Runtime* raw = rt.get();
  rt->comm_->set_fatal_handler([raw](const Status& why) { raw->on_fatal(why); });

  comm::ServerThread::Options sopts;
  sopts.spin_ns = rt->config_.get_int("SPIN_US") * 1000;
  sopts.tick_ns = std::min<int64_t>(rt->comm_->options().heartbeat_ns / 2, 100'000'000);
  rt->server_ = std::make_unique<comm::ServerThread>(*rt->comm_, *rt->transport_, sopts);
  if (int fd = rt->bootstrap_->event_fd(); fd >= 0) {
    rt->server_->add_fd(fd, [raw] {
      Status s = raw->bootstrap_->handle_event();
      if (!s) raw->comm_->report_fatal(s);
    });
  }
  rt->server_->start();
  rt->comm_->start_monitoring();
  if (Status s = rt->bootstrap_->barrier(); !s)
    log::die(kExitJobFailed, "start-up barrier failed: " + s.to_string());
  return rt;
}

Runtime::~Runtime() { stop(); }

void Runtime::stop() {
  if (stopped_) return;
  stopped_ = true;
  // note: two barriers. After the first every node has finished its work; after the second no
  // node still watches its peers, so closing connections cannot look like a failure.
  if (Status s = bootstrap_->barrier(); !s) comm_->report_fatal(s);
  comm_->begin_shutdown();
  if (Status s = bootstrap_->barrier(); !s) comm_->report_fatal(s);
  server_->stop();
  transport_->close(2000);
  report_stats();
  bootstrap_->finish(0);
}

std::string Runtime::stats_json() const {
  nlohmann::json j;
  j["node"] = comm_->rank();
  j["nodes"] = comm_->size();
  j["messages"] = comm_->counters().to_json(comm_->registry());
  auto st = server_->stats();
  j["server"] = {{"sleeps", st.sleeps}, {"wakeups", st.wakeups}};
  return j.dump(2);
}

void Runtime::report_stats() {
  if (config_.get_bool("STATS")) {
    std::string table = comm_->counters().format_table(comm_->registry());
    std::fprintf(stderr, "loom[%u] statistics:\n%s", comm_->rank(), table.c_str());
  }
  std::string path = config_.get_string("STATS_JSON");
  if (!path.empty()) {
    for (size_t pos; (pos = path.find("%r")) != std::string::npos;)
      path.replace(pos, 2, std::to_string(comm_->rank()));
    std::ofstream out(path);
    out << stats_json() << "\n";
    if (!out) LOOM_WARN("cannot write statistics to {}", path);
  }
}

void Runtime::on_fatal(const Status& why) {
  // Runs once, on whichever thread found the problem (often the server thread).
  std::string reason = why.message().empty() ? why.to_string() : why.message();
  LOOM_ERROR("{}", reason);
  // Tell the others, unless they told us (then they know).
  if (!comm_->aborted_by_peer()) {
    std::string text = fmt::format("node {}: {}", comm_->rank(), reason);
    auto bytes = std::as_bytes(std::span<const char>(text.data(), text.size()));
    for (comm::NodeId p = 0; p < comm_->size(); ++p)
      if (p != comm_->rank() && comm_->peer_alive(p))
        (void)comm_->send(p, comm::sys_msg::kAbort, bytes);
    // Give the messages a moment to leave (try_progress does nothing inside a UCX callback,
    // where the server thread may be; the send path pushes eager messages out itself).
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
    while (std::chrono::steady_clock::now() < until) {
      if (!transport_->try_progress()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  bootstrap_->abort_job(reason);
  std::fflush(stdout);
  log::die(kExitJobFailed, "stopping: the job failed");
}

Runtime& current() {
  LOOM_CHECK(g_runtime != nullptr, "Loom is not initialized: call loom::init() first");
  return *g_runtime;
}

}  // namespace loom::runtime

namespace loom {

void init(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  if (runtime::g_runtime != nullptr) return;
  runtime::g_runtime = runtime::Runtime::start();
}

void finalize() {
  if (runtime::g_runtime == nullptr) return;
  runtime::g_runtime->stop();
  runtime::g_runtime.reset();
}

bool initialized() { return runtime::g_runtime != nullptr; }
int node_id() { return static_cast<int>(runtime::current().rank()); }
int num_nodes() { return static_cast<int>(runtime::current().size()); }

}  // namespace loom

extern "C" {
void loom_init(int* argc, char*** argv) { loom::init(argc, argv); }
void loom_finalize(void) { loom::finalize(); }
int loom_node_id(void) { return loom::node_id(); }
int loom_num_nodes(void) { return loom::num_nodes(); }
}

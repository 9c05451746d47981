#include "runtime/runtime.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <malloc.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "base/cpus.h"
#include "base/log.h"
#include "loom/loom.h"
#include "loom/loom.hpp"
#include "runtime/fault_inject.h"
#include "runtime/leaving_message.h"
#include "runtime/parmacs.h"
#include "runtime/stop_signals.h"

namespace loom::runtime {
namespace {

namespace boot = comm::boot;

std::unique_ptr<Runtime> g_runtime;
// The runtime a stop signal reports on (the stop-signal thread is not ordered with init and
// finalize): set once it runs, cleared before it is torn down.
Mutex g_stop_mu;
Runtime* g_stop_target GUARDED_BY(g_stop_mu) = nullptr;
// The runtime being started (Runtime::start): a stop signal then removes its UCX_POSIX_DIR.
Runtime* g_starting GUARDED_BY(g_stop_mu) = nullptr;
memory::AddressSpace::StaticSegment g_program_data;
FaultInject g_inject;
// Set by the on_exit handler: the process is exiting with this status.
std::atomic<bool> g_exiting{false};
std::atomic<int> g_exit_status{0};

// How long a node that lost a peer waits for the launcher to name an earlier failure (on_fatal).
constexpr int kLauncherWordMs = 300;

std::string_view leave_words(Leave how) {
  switch (how) {
    case Leave::kFinalize:
      return "called loom::finalize";
    case Leave::kSession:
      return "ended its loom::Session (returned from main?)";
    case Leave::kExit0:
      return "exited with status 0 without loom::finalize";
  }
  return "left";
}

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
  Result<FaultInject> inject = FaultInject::parse(rt->config_.get_string("FAULT_INJECT"));
  if (!inject) log::die(kExitConfig, inject.status().message());
  g_inject = *inject;
  int64_t hb = rt->config_.get_int("HEARTBEAT_MS"),
          timeout = rt->config_.get_int("PEER_TIMEOUT_MS");
  if (timeout < 2 * hb)
    log::die(kExitConfig,
             fmt::format("LOOM_PEER_TIMEOUT_MS={} must be at least twice LOOM_HEARTBEAT_MS={}, or "
                         "healthy peers would be declared failed",
                         timeout, hb));

  // The launcher's rank, for messages before the bootstrap has confirmed it.
  for (const char* var : {"LOOM_RANK", "PMIX_RANK"})
    if (const char* v = std::getenv(var); v != nullptr && *v != '\0') {
      log::set_rank(std::atoi(v));
      break;
    }
  g_inject.at("boot", -1);
  const int64_t startup_ms = rt->config_.get_int("STARTUP_TIMEOUT_MS");
  Result<std::unique_ptr<comm::Bootstrap>> boot = comm::make_bootstrap(rt->config_);
  if (!boot) log::die(kExitJobFailed, "cannot join the job: " + boot.status().to_string());
  rt->bootstrap_ = std::move(*boot);
  log::set_rank(static_cast<int>(rt->bootstrap_->rank()));

  // Under mpirun/srun, UCX's shared-memory files go into a directory of this job's (the same on
  // every node of a host: named after the job token), which the nodes remove when they end or
  // the job fails; loomrun makes one of its own (docs/launcher.md).
  if (rt->bootstrap_->name() == "pmix" && std::getenv("UCX_POSIX_DIR") == nullptr) {
    std::string dir = "/dev/shm/loom-" + rt->bootstrap_->job_token().substr(0, 16);
    if (::mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST) {
      ::setenv("UCX_POSIX_DIR", dir.c_str(), 1);
      rt->shm_dir_ = dir;
    }
  }
  // A node stopped by a signal while it starts (mpirun's SIGTERM when another failed) removes the
  // directory too; once running, it also writes its counters (on_stop_signal).
  {
    MutexLock l(g_stop_mu);
    g_starting = rt.get();
  }
  install_stop_signals([](int sig) {
    MutexLock l(g_stop_mu);
    if (g_stop_target != nullptr)
      g_stop_target->on_stop_signal(sig);
    else if (g_starting != nullptr)
      g_starting->remove_shm_dir();
  });
  comm::UcxTransport::Options topts;
  topts.tls = rt->config_.get_string("TRANSPORTS");
  topts.net_devices = rt->config_.get_string("NET_DEVICES");
  topts.err_handling = rt->config_.get_bool("UCX_ERR_HANDLING");
  Result<std::unique_ptr<comm::UcxTransport>> transport = comm::UcxTransport::create(topts);
  if (!transport) {
    // An unusable LOOM_TRANSPORTS or LOOM_NET_DEVICES is bad configuration (and the same on
    // every node); anything else means the network could not start here.
    int code =
        transport.status().code() == StatusCode::kInvalidArgument ? kExitConfig : kExitJobFailed;
    std::string why = "cannot start the network: " + transport.status().message();
    rt->bootstrap_->abort_job(why);
    rt->fail_start(code, why);
  }
  rt->transport_ = std::move(*transport);

  Result<std::vector<std::string>> addresses = rt->bootstrap_->allgather(
      rt->transport_->local_address(),
      {boot::Step::kStartup, "the address exchange (bootstrap)", startup_ms, startup_ms});
  if (!addresses)
    rt->fail_start(kExitJobFailed, "address exchange failed: " + addresses.status().to_string());
  g_inject.at("setup", static_cast<int>(rt->bootstrap_->rank()));
  if (Status s = rt->transport_->connect(rt->bootstrap_->rank(), *addresses); !s) {
    // why: a peer that died meanwhile breaks endpoints to other nodes too (their shared memory
    // goes with it), so the launcher's word on who failed is the better explanation, if it has
    // one; it comes within moments.
    std::string why = s.to_string();
    if (Status b = rt->bootstrap_->await_failure(1000); !b) why = b.message();
    rt->bootstrap_->abort_job(why);
    rt->fail_start(kExitJobFailed, why);
  }

  uint16_t tag = comm::job_tag_of(rt->bootstrap_->job_token());
  rt->comm_ = std::make_unique<comm::Comm>(*rt->transport_,
                                           comm::CommOptions::from_config(rt->config_, tag));
  Runtime* raw = rt.get();
  rt->comm_->set_fatal_handler([raw](const Status& why) { raw->on_fatal(why); },
                               /*ends_process=*/true);

  rt->start_memory();
  rt->register_runtime_messages();

  comm::ServerThread::Options sopts;
  sopts.spin_ns = rt->config_.get_int("SPIN_US") * 1000;
  sopts.spin_while_computing = rt->config_.get_bool("SPIN_WHILE_COMPUTING");
  sopts.tick_ns = std::min<int64_t>(rt->comm_->options().heartbeat_ns / 2, 100'000'000);
  // Handlers never touch the application view (docs/architecture.md); a fault there would wait
  // for this very thread.
  sopts.on_start = [] { memory::forbid_faults_on_this_thread("the server thread"); };
  rt->server_ = std::make_unique<comm::ServerThread>(*rt->comm_, *rt->transport_, sopts);
  if (int fd = rt->bootstrap_->event_fd();
      fd >= 0 && !g_inject.deaf(static_cast<int>(rt->rank()))) {
    rt->server_->add_fd(fd, [raw] {
      Status s = raw->bootstrap_->handle_event();
      if (!s) raw->comm_->report_fatal(s);
    });
  }
  rt->server_->start();
  rt->comm_->start_monitoring();
  {
    MutexLock l(g_stop_mu);
    g_stop_target = raw;
  }
  if (Status s = rt->bootstrap_->barrier(
          {boot::Step::kStartupLast, "the start-up barrier (set-up)", startup_ms, 0});
      !s)
    rt->fail_start(kExitJobFailed, "start-up barrier failed: " + s.to_string());
  on_exit([](int status, void*) { Runtime::process_exiting(status); }, nullptr);
  {
    MutexLock l(g_stop_mu);
    g_starting = nullptr;
  }
  g_inject.at("run", static_cast<int>(rt->rank()));
  return rt;
}

void Runtime::process_exiting(int status) {
  g_exit_status.store(status, std::memory_order_relaxed);
  g_exiting.store(true, std::memory_order_release);
}

Runtime::~Runtime() {
  {
    MutexLock l(g_stop_mu);
    if (g_stop_target == this) g_stop_target = nullptr;
  }
  if (stopped_ && !stop_done_.load(std::memory_order_acquire)) {
    // The process exits while loom::finalize runs (exit() from another thread, or from inside
    // it): the runtime is in use and cannot be torn down. The others' shutdown is bounded, and
    // the launcher names this node (it ends without its goodbye).
    std::fflush(nullptr);
    std::_Exit(g_exit_status.load(std::memory_order_relaxed));
  }
  if (!stopped_ && g_exiting.load(std::memory_order_acquire)) {
    int status = g_exit_status.load(std::memory_order_relaxed);
    if (status != 0) {
      // The program ended with an error while the job runs: this node has failed, with its own
      // status (loomrun then returns it).
      fatal_exit_code_.store(status, std::memory_order_relaxed);
      comm_->report_fatal(Status::peer_failed(
          fmt::format("node {} exited with status {} without loom::finalize", rank(), status)));
    }
    stop(Leave::kExit0);
  }
  stop();
  stop_shutdown_watchdog();
}

void Runtime::register_runtime_messages() {
  Status s =
      register_leaving_handler(*comm_, *barriers_, [this](comm::NodeId from, std::string how) {
        MutexLock l(leaving_mu_);
        leaving_how_[from] = std::move(how);
      });
  LOOM_CHECK(s.is_ok(), "registering runtime.leaving: {}", s.to_string());
  barriers_->set_stranded_handler([this](comm::NodeId left, uint64_t id, uint64_t episode) {
    std::string how = "left the job";
    {
      MutexLock l(leaving_mu_);
      if (auto it = leaving_how_.find(left); it != leaving_how_.end()) how = it->second;
    }
    comm_->report_fatal(
        Status::peer_failed(fmt::format(
            "node {} {} while node {} waits at barrier {:#x} (episode {}), which node {} never "
            "reached",
            left, how, rank(), id, episode, left)),
        left);
  });
}

void Runtime::start_shutdown_watchdog(int64_t ms) {
  watchdog_ = std::thread([this, ms] {
    MutexLock l(watchdog_mu_);
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (!watchdog_done_)
      if (watchdog_cv_.wait_until(watchdog_mu_, until) == std::cv_status::timeout) break;
    if (watchdog_done_) return;
    std::fflush(stdout);
    log::die(kExitJobFailed,
             fmt::format("the shutdown did not finish within {} ms (LOOM_SHUTDOWN_TIMEOUT_MS; it "
                         "was {}): stopping this node",
                         ms, shutdown_doing_.load(std::memory_order_relaxed)));
  });
}

void Runtime::stop_shutdown_watchdog() {
  if (!watchdog_.joinable()) return;
  {
    MutexLock l(watchdog_mu_);
    watchdog_done_ = true;
  }
  watchdog_cv_.notify_all();
  watchdog_.join();
}

void Runtime::stop(Leave how) {
  if (stopped_) return;
  stopped_ = true;
  const int64_t shutdown_ms = config_.get_int("SHUTDOWN_TIMEOUT_MS");
  // Tell the others that this node leaves, with the barrier episodes it completed: a peer that
  // waits at a barrier episode this node never reached would otherwise wait forever.
  {
    const std::vector<std::byte> payload =
        encode_leaving({std::string(leave_words(how)), barriers_->episodes()});
    for (comm::NodeId p = 0; p < size(); ++p)
      if (p != rank() && comm_->peer_alive(p)) (void)comm_->send(p, kLeavingMsg, payload);
  }
  // note: two barriers. After the first every node has finished its work; after the second no
  // node still watches its peers, so closing connections cannot look like a failure. The first
  // waits for nodes that still compute (heartbeats go on); from then on every step is bounded.
  if (Status s = bootstrap_->barrier(
          {boot::Step::kShutdown, "shutdown barrier 1 (loom::finalize)", 0, shutdown_ms});
      !s)
    comm_->report_fatal(s);
  start_shutdown_watchdog(2 * shutdown_ms);
  g_inject.at("shutdown", static_cast<int>(rank()));
  comm_->begin_shutdown();
  shutdown_doing_ = "waiting at shutdown barrier 2";
  if (Status s = bootstrap_->barrier(
          {boot::Step::kShutdownLast, "shutdown barrier 2", shutdown_ms, shutdown_ms});
      !s)
    comm_->report_fatal(s);
  g_inject.at("exit", static_cast<int>(rank()));
  shutdown_doing_ = "stopping the server thread";
  server_->stop();
  memory::uninstall_fault_handler();
  if (dumper_id_ >= 0) log::remove_state_dumper(dumper_id_);
  shutdown_doing_ = "closing the network";
  transport_->close(2000);
  // The last node of this host to get here removes the directory (the others find it in use).
  if (!shm_dir_.empty()) ::rmdir(shm_dir_.c_str());
  shutdown_doing_ = "writing the statistics (LOOM_STATS, LOOM_STATS_JSON)";
  report_stats();
  shutdown_doing_ = "saying goodbye to the launcher";
  bootstrap_->finish(0);
  stop_shutdown_watchdog();
  stop_done_.store(true, std::memory_order_release);
}

void Runtime::start_memory() {
  auto base = static_cast<uintptr_t>(config_.get_int("REGION_BASE"));
  auto size = static_cast<size_t>(config_.get_int("REGION_SIZE"));
  constexpr size_t kChunk = memory::Heap::kChunkPages * memory::kPageBytes;
  if (size % kChunk != 0 || base % memory::kPageBytes != 0)
    fail_start(kExitConfig,
               fmt::format("LOOM_REGION_SIZE={} must be a multiple of {} MiB (the heap's "
                           "chunk) and LOOM_REGION_BASE={:#x} a multiple of the page size",
                           size, kChunk >> 20, base));
  // The default protocol, and the registered ones (they name message types and page
  // protocols by index, so every node must have the same list).
  std::vector<std::string> names = protocols::protocol_names();
  std::string default_name = config_.get_string("PROTOCOL");
  protocols::ProtocolId default_id = protocols::protocol_id(default_name);
  if (default_id == memory::kProtocolUnknown)
    fail_start(kExitConfig, fmt::format("LOOM_PROTOCOL={}: no such protocol (registered: {})",
                                        default_name, fmt::join(names, ", ")));
  // Every node must map the region at the same place with the same size, and run the same
  // protocols.
  std::string mine = fmt::format("{:#x}+{}", base, size);
  std::string protos = fmt::format("{} (default {})", fmt::join(names, ","), default_name);
  const int64_t startup_ms = config_.get_int("STARTUP_TIMEOUT_MS");
  Result<std::vector<std::string>> all = bootstrap_->allgather(
      mine + " " + protos,
      {comm::boot::Step::kStartup, "the region check (set-up)", startup_ms, startup_ms});
  if (!all) fail_start(kExitJobFailed, "region check failed: " + all.status().to_string());
  for (size_t n = 0; n < all->size(); ++n) {
    const std::string& theirs = (*all)[n];
    std::string their_region = theirs.substr(0, theirs.find(' '));
    std::string their_protos = theirs.substr(std::min(theirs.size(), their_region.size() + 1));
    if (their_region != mine)
      fail_start(kExitConfig,
                 fmt::format("node {} maps the shared region at {} but this node at {} "
                             "(LOOM_REGION_BASE and LOOM_REGION_SIZE must be the same on "
                             "every node)",
                             n, their_region, mine));
    if (their_protos != protos)
      fail_start(kExitConfig,
                 fmt::format("node {} has the protocols {} but this node {} (LOOM_PROTOCOL and "
                             "the protocols a program registers must be the same on every node)",
                             n, their_protos, protos));
  }
  memory::AddressSpace::StaticSegment data = g_program_data;
  data.keep_contents = comm_->rank() == 0;
  // note: the config table checked the value.
  const memory::AddressSpace::WriteDetect detect =
      memory::AddressSpace::parse_write_detect(config_.get_string("WRITE_DETECT"))
          .value_or(memory::AddressSpace::WriteDetect::kAuto);
  Result<std::unique_ptr<memory::AddressSpace>> space =
      memory::AddressSpace::create(base, size, data, detect);
  if (!space) {
    bootstrap_->abort_job(space.status().message());
    fail_start(kExitConfig, space.status().message());
  }
  space_ = std::move(*space);
  table_ = std::make_unique<memory::PageTable>(space_->num_pages());
  heap_ = std::make_unique<memory::Heap>(*comm_, *space_, *table_, default_id);
  protocols::hlrc::Hlrc::Options hopts;
  hopts.prefetch = config_.get_bool("PREFETCH");
  hopts.migrate_after = static_cast<uint32_t>(config_.get_int("HOME_MIGRATION"));
  hopts.thin_offers = config_.get_bool("THIN_OFFERS");
  hopts.push_pages = static_cast<uint32_t>(config_.get_int("PUSH_PAGES"));
  hopts.fetch_ahead = static_cast<uint32_t>(config_.get_int("FETCH_AHEAD"));
  hopts.first_touch_run = static_cast<uint32_t>(config_.get_int("FIRST_TOUCH_RUN"));
  hopts.write_ahead = static_cast<uint32_t>(config_.get_int("WRITE_AHEAD"));
  hopts.hot_idle_releases = static_cast<uint32_t>(config_.get_int("HOT_IDLE_RELEASES"));
  hopts.stall_report_ms = config_.get_int("STALL_REPORT_MS");
  hopts.causal_fetch = config_.get_bool("CAUSAL_FETCH");
  hlrc_ = std::make_unique<protocols::hlrc::Hlrc>(*comm_, *space_, *table_, *heap_, hopts);
  platform_ = std::make_unique<protocols::Platform>(*space_, *table_, *heap_, *hlrc_);
  platform_->add(hlrc_.get(), nullptr);
  for (size_t id = 1; id < names.size(); ++id) {
    protocols::Core core{*comm_,  *space_, *table_, *heap_, static_cast<protocols::ProtocolId>(id),
                         &config_};
    std::unique_ptr<protocols::Protocol> p =
        protocols::make_protocol(static_cast<protocols::ProtocolId>(id), core);
    protocols::Protocol* raw = p.get();
    platform_->add(raw, std::move(p));
  }
  protocols::freeze_protocols();
  sync::LockPolicy lock_policy;
  lock_policy.fairness = static_cast<uint32_t>(config_.get_int("LOCK_FAIRNESS"));
  lock_policy.keep_ns = config_.get_int("LOCK_KEEP_US") * 1000;
  lock_policy.lazy = config_.get_bool("LAZY_RELEASE");
  lock_policy.push = config_.get_bool("LOCK_PUSH");
  locks_ = std::make_unique<sync::LockService>(*comm_, *platform_, lock_policy);
  barriers_ = std::make_unique<sync::BarrierService>(*comm_, *platform_, space_->num_pages());
  conds_ = std::make_unique<sync::CondService>(*comm_, *locks_);
  objects_ = std::make_unique<sync::ObjectService>(*comm_, *platform_);
  hlrc_->init_static_pages();
  // Registered before the start-up barrier: no peer can send these types earlier.
  for (Status s :
       {heap_->register_messages(), platform_->register_messages(), locks_->register_messages(),
        barriers_->register_messages(), conds_->register_messages(), objects_->register_messages(),
        register_parmacs_messages(*this)})
    LOOM_CHECK(s.is_ok(), "registering message types: {}", s.to_string());
  if (Status s = memory::install_fault_handler(space_.get(), platform_.get()); !s)
    fail_start(kExitJobFailed, s.to_string());
  // note: a dumper never blocks (it runs on the fatal path, maybe under the lock it would take).
  dumper_id_ = log::add_state_dumper([this] {
    std::optional<size_t> n = hlrc_->try_stored_records();
    if (n)
      std::fprintf(stderr, "loom[%u] notices stored: %zu\n", comm_->rank(), *n);
    else
      std::fprintf(stderr, "loom[%u] notices stored: (not read: their lock is held)\n",
                   comm_->rank());
  });
}

nlohmann::json Runtime::dsm_json() const {
  const protocols::hlrc::Counters& c = hlrc_->counters();
  const auto v = [](const std::atomic<uint64_t>& a) { return protocols::relaxed(a); };
  nlohmann::json j;
  j["read_faults"] = v(c.read_faults);
  j["write_faults"] = v(c.write_faults);
  j["refaults"] = v(c.refaults);
  j["first_touch_run_pages"] = v(c.first_touch_run_pages);
  j["pages_fetched"] = v(c.pages_fetched);
  j["fetch_retries"] = v(c.fetch_retries);
  j["twins"] = v(c.twins);
  j["twins_ahead"] = v(c.twins_ahead);
  j["twins_ahead_unwritten"] = v(c.twins_ahead_unwritten);
  j["diffs_created"] = v(c.diffs_created);
  j["diff_bytes"] = v(c.diff_bytes);
  j["diffs_applied"] = v(c.diffs_applied);
  j["diff_bytes_applied"] = v(c.diff_bytes_applied);
  j["diffs_held"] = v(c.diffs_held);
  j["requests_held"] = v(c.requests_held);
  j["intervals"] = v(c.intervals);
  j["notices_sent"] = v(c.notices_sent);
  j["notices_received"] = v(c.notices_received);
  j["notices_stored"] = hlrc_->stored_records();
  j["invalidations"] = v(c.invalidations);
  j["two_way_merges"] = v(c.two_way_merges);
  j["prefetches"] = v(c.prefetches);
  j["prefetches_dropped"] = v(c.prefetches_dropped);
  j["notice_gc_rounds"] = v(c.gc_rounds);
  j["home_offers"] = v(c.home_offers);
  j["homes_moved"] = v(c.homes_moved);
  j["homes_taken"] = v(c.homes_taken);
  j["home_offers_declined"] = v(c.offers_declined);
  j["home_offers_deferred"] = v(c.offers_deferred);
  j["home_offers_thin_taken"] = v(c.thin_offers_taken);
  j["home_offer_masters_sent"] = v(c.offer_masters_sent);
  j["diffs_held_back"] = v(c.diffs_held_back);
  j["home_redirects_sent"] = v(c.redirects_sent);
  j["home_redirects_followed"] = v(c.redirects_followed);
  j["write_hints"] = v(c.write_hints);
  j["pages_ahead"] = v(c.pages_ahead);
  j["causal_fetches"] = v(c.causal_fetches);
  j["pages_sent_ahead"] = v(c.pages_sent_ahead);
  j["diffs_forwarded"] = v(c.diffs_forwarded);
  j["pushes_sent"] = v(c.pushes_sent);
  j["pushes_installed"] = v(c.pushes_installed);
  j["pushes_used"] = v(c.pushes_used);
  j["pushes_declined"] = v(c.pushes_declined);
  j["pushes_dropped"] = v(c.pushes_dropped);
  const sync::LockCounters l = locks_->counters();
  j["lock_acquires_local"] = l.local_acquires;
  j["lock_acquires_remote"] = l.remote_acquires;
  j["lock_local_handoffs"] = l.local_handoffs;
  j["lock_grants_sent"] = l.grants_sent;
  j["lock_lazy_unlocks"] = l.lazy_unlocks;
  j["lock_handler_releases"] = l.handler_releases;
  j["lock_deferred_grants"] = l.deferred_grants;
  j["lock_kept_unlocks"] = l.kept_unlocks;
  j["lock_kept_reacquires"] = l.kept_reacquires;
  j["lock_keeps_timed_out"] = l.keeps_timed_out;
  j["lock_pushes"] = l.pushes;
  j["lock_pushes_received"] = l.pushes_received;
  j["lock_pushes_unused"] = l.pushes_unused;
  j["lock_requests_dropped"] = v(l.requests_dropped);
  const sync::BarrierCounters& b = barriers_->counters();
  j["barrier_waits"] = v(b.waits);
  j["barrier_solicited_arrivals"] = v(b.solicited_arrivals);
  const sync::ObjectCounters& o = objects_->counters();
  j["object_calls"] = v(o.calls);
  j["object_calls_local"] = v(o.calls_local);
  j["object_operations"] = v(o.operations);
  j["object_replies_deferred"] = v(o.deferred);
  j["object_views_sent"] = v(o.views_sent);
  j["objects_created"] = v(o.created);
  memory::AddressSpace::Stats as = space_->stats();
  j["write_detection"] = space_->write_detection();
  j["write_tracking_arms"] = v(c.wp_arms);
  j["write_tracking_drops"] = v(c.wp_drops);
  j["write_tracking_scans"] = v(c.wp_scans);
  j["write_tracking_written"] = v(c.wp_written);
  j["uffd_writeprotect_calls"] = as.wp_arm_calls;
  j["pagemap_scan_calls"] = as.wp_scan_calls;
  j["protect_calls"] = as.protect_calls;
  j["protection_collapses"] = as.collapses;
  j["backed_bytes"] = as.backed_bytes;
  memory::Heap::Stats hs = heap_->stats();
  j["allocs"] = hs.allocs;
  j["frees"] = hs.frees;
  j["chunks_taken"] = hs.chunks;
  j["home_queries"] = hs.home_queries;
  j["home_arbitrations"] = hs.home_arbitrations;
  j["first_touches"] = hs.first_touches;
  j["first_touches_local"] = hs.first_touches_local;
  j["homes_cached"] = hs.homes_cached;
  j["home_windows"] = hs.home_windows;
  j["pages_opened"] = hs.pages_opened;
  j["opened_untouched"] = hs.opened_untouched;
  j["opened_kept"] = hs.opened_kept;
  auto ms = [](uint64_t ns) { return static_cast<double>(ns) / 1e6; };
  j["time_ms"] = {{"fault_handler", ms(v(c.fault_ns))},
                  {"fetch_wait", ms(v(c.fetch_wait_ns))},
                  {"page_fetch", ms(v(c.fetch_ns))},
                  {"home_wait", ms(v(c.home_wait_ns))},
                  {"lock_wait", ms(v(l.wait_ns))},
                  {"lock_wait_max", ms(v(l.max_wait_ns))},
                  {"barrier_wait", ms(v(b.wait_ns))},
                  {"object_call_wait", ms(v(o.wait_ns))},
                  {"handlers", ms(server_->stats().handler_ns)}};
  // The other protocols' own counters, by name.
  std::vector<std::string> names = protocols::protocol_names();
  for (size_t id = 1; id < platform_->size() && id < names.size(); ++id) {
    nlohmann::json pj = nlohmann::json::object();
    for (const auto& [name, value] :
         platform_->at(static_cast<protocols::ProtocolId>(id)).counter_list())
      pj[name] = value;
    j["protocols"][names[id]] = pj;
  }
  return j;
}

std::string Runtime::dsm_table() const {
  std::string out;
  nlohmann::json j = dsm_json();
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "protocols") {
      for (auto p = it.value().begin(); p != it.value().end(); ++p)
        for (auto c = p.value().begin(); c != p.value().end(); ++c)
          out += fmt::format("  {:<28} {}\n", p.key() + "." + c.key(), c.value().dump());
    } else if (it.value().is_object()) {
      for (auto t = it.value().begin(); t != it.value().end(); ++t)
        out += fmt::format("  {:<28} {:.3f}\n", "time_ms." + t.key(), t.value().get<double>());
    } else {
      out += fmt::format("  {:<28} {}\n", it.key(), it.value().dump());
    }
  }
  return out;
}

std::string Runtime::stats_json(std::string_view stopped_by) const {
  nlohmann::json j;
  j["node"] = comm_->rank();
  j["nodes"] = comm_->size();
  j["cpus"] = allowed_cpus();
  if (!stopped_by.empty()) {
    j["partial"] = true;
    j["stopped_by"] = std::string(stopped_by);
  }
  j["messages"] = comm_->counters().to_json(comm_->registry());
  j["dsm"] = dsm_json();
  auto st = server_->stats();
  j["server"] = {{"sleeps", st.sleeps},
                 {"wakeups", st.wakeups},
                 {"spins_skipped", st.spins_skipped},
                 {"handled_by_waiters", comm_->handled_by_waiters()}};
  return j.dump(2);
}

void Runtime::report_stats(std::string_view stopped_by) {
  // Once per node: a stop signal and a failure of the job may both come at the end.
  if (stats_reported_.exchange(true)) return;
  if (config_.get_bool("STATS")) {
    std::string table = comm_->counters().format_table(comm_->registry());
    std::string dsm = dsm_table();
    std::string head =
        stopped_by.empty()
            ? fmt::format("loom[{}] statistics:", comm_->rank())
            : fmt::format("loom[{}] statistics (partial: stopped by {}):", comm_->rank(),
                          stopped_by);
    std::fprintf(stderr, "%s\n%s  shared memory:\n%s", head.c_str(), table.c_str(), dsm.c_str());
  }
  std::string path = config_.get_string("STATS_JSON");
  if (!path.empty()) {
    for (size_t pos; (pos = path.find("%r")) != std::string::npos;)
      path.replace(pos, 2, std::to_string(comm_->rank()));
    // Written whole or not at all: a node killed while writing leaves no half file.
    std::string tmp = path + ".tmp";
    std::ofstream out(tmp);
    out << stats_json(stopped_by) << "\n";
    out.close();
    if (!out || std::rename(tmp.c_str(), path.c_str()) != 0)
      LOOM_WARN("cannot write statistics to {}", path);
  }
}

void Runtime::fail_start(int code, std::string_view msg) {
  remove_shm_dir();
  log::die(code, msg);
}

void Runtime::remove_shm_dir() {
  // The job is over: segments of nodes that died while UCX made them would stay forever.
  if (shm_dir_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(shm_dir_, ec);
}

void Runtime::on_stop_signal(int sig) {
  // On the stop-signal thread (stop_signals.h): the program's output first, then the counters.
  std::fflush(stdout);
  std::string name = sigabbrev_np(sig) != nullptr ? std::string("SIG") + sigabbrev_np(sig)
                                                  : fmt::format("signal {}", sig);
  report_stats(name);
  std::fflush(nullptr);
  remove_shm_dir();  // the job is being stopped (mpirun sends SIGTERM when another node failed)
}

void Runtime::on_fatal(const Status& why) {
  // Runs once, on whichever thread found the problem (often the server thread).
  auto reason_of = [](const Status& s) {
    return s.message().empty() ? s.to_string() : s.message();
  };
  std::string reason = reason_of(why);
  comm::NodeId culprit = comm_->culprit();
  if (comm_->lost_a_peer()) {
    // The lost peer may have stopped because another node failed, and then the launcher is
    // telling every node about that failure now: its word names the cause, the lost connection
    // only a consequence (measured: a survivor named the node that stopped before it, not the
    // one killed).
    if (Status named = bootstrap_->await_failure(kLauncherWordMs); !named) {
      reason = reason_of(named);
      culprit = comm::kNoNode;
    }
  }
  LOOM_ERROR("{}", reason);
  // Tell the others, unless they told us (then they know).
  if (!comm_->aborted_by_peer()) {
    std::string text = fmt::format("node {}: {}", comm_->rank(), reason);
    std::vector<std::byte> bytes(sizeof culprit + text.size());
    std::memcpy(bytes.data(), &culprit, sizeof culprit);
    std::memcpy(bytes.data() + sizeof culprit, text.data(), text.size());
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
  remove_shm_dir();
  bootstrap_->abort_job(reason, culprit, fatal_exit_code_.load(std::memory_order_relaxed));
  std::fflush(stdout);
  // The counters so far, marked partial: also when the job is being stopped (a launcher's
  // SIGTERM reaches the nodes one after another, and this node may learn that a peer is gone
  // before its own stop-signal thread runs). On a thread of its own, waited for at most a
  // second: this thread may hold a lock the counters take.
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> reported = done->get_future();
  std::thread([this, done, why = fmt::format("job failed: {}", reason)] {
    report_stats(why);
    done->set_value();
  }).detach();
  (void)reported.wait_for(std::chrono::seconds(1));
  log::die(fatal_exit_code_.load(std::memory_order_relaxed), "stopping: the job failed");
}

Runtime& current() {
  LOOM_CHECK(g_runtime != nullptr, "Loom is not initialized: call loom::init() first");
  return *g_runtime;
}

void set_program_data(uintptr_t addr, size_t len) {
  LOOM_CHECK(g_runtime == nullptr, "set_program_data after loom::init");
  g_program_data = {addr, len, false};
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

namespace detail {
void end_session() {
  if (runtime::g_runtime == nullptr) return;
  runtime::g_runtime->stop(runtime::Leave::kSession);
  runtime::g_runtime.reset();
}
}  // namespace detail

bool initialized() { return runtime::g_runtime != nullptr; }
int node_id() {
  if (!initialized())
    log::die(runtime::kExitConfig,
             "loom::node_id: Loom is not initialized (call loom::init first)");
  return static_cast<int>(runtime::current().rank());
}
int num_nodes() {
  if (!initialized())
    log::die(runtime::kExitConfig,
             "loom::num_nodes: Loom is not initialized (call loom::init first)");
  return static_cast<int>(runtime::current().size());
}

}  // namespace loom

extern "C" {
void loom_init(int* argc, char*** argv) { loom::init(argc, argv); }
void loom_finalize(void) { loom::finalize(); }
int loom_node_id(void) { return loom::node_id(); }
int loom_num_nodes(void) { return loom::num_nodes(); }
}

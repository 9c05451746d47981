#include "runtime/runtime.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <malloc.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <thread>

#include "base/log.h"
#include "loom/loom.h"
#include "loom/loom.hpp"
#include "runtime/parmacs.h"
#include "runtime/stop_signals.h"

namespace loom::runtime {
namespace {

std::unique_ptr<Runtime> g_runtime;
// The runtime a stop signal reports on (the stop-signal thread is not ordered with init and
// finalize): set once it runs, cleared before it is torn down.
Mutex g_stop_mu;
Runtime* g_stop_target GUARDED_BY(g_stop_mu) = nullptr;
memory::AddressSpace::StaticSegment g_program_data;

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
  rt->comm_->set_fatal_handler([raw](const Status& why) { raw->on_fatal(why); },
                               /*ends_process=*/true);

  rt->start_memory();

  comm::ServerThread::Options sopts;
  sopts.spin_ns = rt->config_.get_int("SPIN_US") * 1000;
  sopts.spin_while_computing = rt->config_.get_bool("SPIN_WHILE_COMPUTING");
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
  install_stop_signals([](int sig) {
    MutexLock l(g_stop_mu);
    if (g_stop_target != nullptr) g_stop_target->on_stop_signal(sig);
  });
  {
    MutexLock l(g_stop_mu);
    g_stop_target = raw;
  }
  if (Status s = rt->bootstrap_->barrier(); !s)
    log::die(kExitJobFailed, "start-up barrier failed: " + s.to_string());
  return rt;
}

Runtime::~Runtime() {
  {
    MutexLock l(g_stop_mu);
    if (g_stop_target == this) g_stop_target = nullptr;
  }
  stop();
}

void Runtime::stop() {
  if (stopped_) return;
  stopped_ = true;
  // note: two barriers. After the first every node has finished its work; after the second no
  // node still watches its peers, so closing connections cannot look like a failure.
  if (Status s = bootstrap_->barrier(); !s) comm_->report_fatal(s);
  comm_->begin_shutdown();
  if (Status s = bootstrap_->barrier(); !s) comm_->report_fatal(s);
  server_->stop();
  memory::uninstall_fault_handler();
  if (dumper_id_ >= 0) log::remove_state_dumper(dumper_id_);
  transport_->close(2000);
  report_stats();
  bootstrap_->finish(0);
}

void Runtime::start_memory() {
  auto base = static_cast<uintptr_t>(config_.get_int("REGION_BASE"));
  auto size = static_cast<size_t>(config_.get_int("REGION_SIZE"));
  constexpr size_t kChunk = memory::Heap::kChunkPages * memory::kPageBytes;
  if (size % kChunk != 0 || base % memory::kPageBytes != 0)
    log::die(kExitConfig,
             fmt::format("LOOM_REGION_SIZE={} must be a multiple of {} MiB (the heap's "
                         "chunk) and LOOM_REGION_BASE={:#x} a multiple of the page size",
                         size, kChunk >> 20, base));
  // The default protocol, and the registered ones (they name message types and page
  // protocols by index, so every node must have the same list).
  std::vector<std::string> names = protocols::protocol_names();
  std::string default_name = config_.get_string("PROTOCOL");
  protocols::ProtocolId default_id = protocols::protocol_id(default_name);
  if (default_id == memory::kProtocolUnknown)
    log::die(kExitConfig, fmt::format("LOOM_PROTOCOL={}: no such protocol (registered: {})",
                                      default_name, fmt::join(names, ", ")));
  // Every node must map the region at the same place with the same size, and run the same
  // protocols.
  std::string mine = fmt::format("{:#x}+{}", base, size);
  std::string protos = fmt::format("{} (default {})", fmt::join(names, ","), default_name);
  Result<std::vector<std::string>> all = bootstrap_->allgather(mine + " " + protos);
  if (!all) log::die(kExitJobFailed, "region check failed: " + all.status().to_string());
  for (size_t n = 0; n < all->size(); ++n) {
    const std::string& theirs = (*all)[n];
    std::string their_region = theirs.substr(0, theirs.find(' '));
    std::string their_protos = theirs.substr(std::min(theirs.size(), their_region.size() + 1));
    if (their_region != mine)
      log::die(kExitConfig,
               fmt::format("node {} maps the shared region at {} but this node at {} "
                           "(LOOM_REGION_BASE and LOOM_REGION_SIZE must be the same on "
                           "every node)",
                           n, their_region, mine));
    if (their_protos != protos)
      log::die(kExitConfig,
               fmt::format("node {} has the protocols {} but this node {} (LOOM_PROTOCOL and "
                           "the protocols a program registers must be the same on every node)",
                           n, their_protos, protos));
  }
  memory::AddressSpace::StaticSegment data = g_program_data;
  data.keep_contents = comm_->rank() == 0;
  Result<std::unique_ptr<memory::AddressSpace>> space =
      memory::AddressSpace::create(base, size, data);
  if (!space) {
    bootstrap_->abort_job(space.status().message());
    log::die(kExitConfig, space.status().message());
  }
  space_ = std::move(*space);
  table_ = std::make_unique<memory::PageTable>(space_->num_pages());
  heap_ = std::make_unique<memory::Heap>(*comm_, *space_, *table_, default_id);
  protocols::hlrc::Hlrc::Options hopts;
  hopts.prefetch = config_.get_bool("PREFETCH");
  hopts.migrate_after = static_cast<uint32_t>(config_.get_int("HOME_MIGRATION"));
  hopts.push_pages = static_cast<uint32_t>(config_.get_int("PUSH_PAGES"));
  hopts.fetch_ahead = static_cast<uint32_t>(config_.get_int("FETCH_AHEAD"));
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
  locks_ = std::make_unique<sync::LockService>(
      *comm_, *platform_, static_cast<uint32_t>(config_.get_int("LOCK_FAIRNESS")),
      config_.get_bool("LAZY_RELEASE"));
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
    log::die(kExitJobFailed, s.to_string());
  dumper_id_ = log::add_state_dumper([this] {
    std::fprintf(stderr, "loom[%u] notices stored: %zu\n", comm_->rank(), hlrc_->stored_records());
  });
}

nlohmann::json Runtime::dsm_json() const {
  const protocols::hlrc::Counters& c = hlrc_->counters();
  const auto v = [](const std::atomic<uint64_t>& a) { return protocols::relaxed(a); };
  nlohmann::json j;
  j["read_faults"] = v(c.read_faults);
  j["write_faults"] = v(c.write_faults);
  j["refaults"] = v(c.refaults);
  j["pages_fetched"] = v(c.pages_fetched);
  j["fetch_retries"] = v(c.fetch_retries);
  j["twins"] = v(c.twins);
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
  const sync::LockCounters& l = locks_->counters();
  j["lock_acquires_local"] = v(l.local_acquires);
  j["lock_acquires_remote"] = v(l.remote_acquires);
  j["lock_local_handoffs"] = v(l.local_handoffs);
  j["lock_grants_sent"] = v(l.grants_sent);
  j["lock_lazy_unlocks"] = v(l.lazy_unlocks);
  j["lock_handler_releases"] = v(l.handler_releases);
  j["lock_deferred_grants"] = v(l.deferred_grants);
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
  auto ms = [](uint64_t ns) { return static_cast<double>(ns) / 1e6; };
  j["time_ms"] = {
      {"fault_handler", ms(v(c.fault_ns))},   {"fetch_wait", ms(v(c.fetch_wait_ns))},
      {"page_fetch", ms(v(c.fetch_ns))},      {"home_wait", ms(v(c.home_wait_ns))},
      {"lock_wait", ms(v(l.wait_ns))},        {"barrier_wait", ms(v(b.wait_ns))},
      {"object_call_wait", ms(v(o.wait_ns))}, {"handlers", ms(server_->stats().handler_ns)}};
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
  if (!stopped_by.empty()) {
    j["partial"] = true;
    j["stopped_by"] = std::string(stopped_by);
  }
  j["messages"] = comm_->counters().to_json(comm_->registry());
  j["dsm"] = dsm_json();
  auto st = server_->stats();
  j["server"] = {
      {"sleeps", st.sleeps}, {"wakeups", st.wakeups}, {"spins_skipped", st.spins_skipped}};
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

void Runtime::on_stop_signal(int sig) {
  // On the stop-signal thread (stop_signals.h): the program's output first, then the counters.
  std::fflush(stdout);
  std::string name = sigabbrev_np(sig) != nullptr ? std::string("SIG") + sigabbrev_np(sig)
                                                  : fmt::format("signal {}", sig);
  report_stats(name);
  std::fflush(nullptr);
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
  // The counters so far, marked partial: also when the job is being stopped (a launcher's
  // SIGTERM reaches the nodes one after another, and this node may learn that a peer is gone
  // before its own stop-signal thread runs).
  // On a thread of its own, waited for at most a second: this thread may hold a lock the
  // counters take.
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> reported = done->get_future();
  std::thread([this, done, why = fmt::format("job failed: {}", reason)] {
    report_stats(why);
    done->set_value();
  }).detach();
  (void)reported.wait_for(std::chrono::seconds(1));
  log::die(kExitJobFailed, "stopping: the job failed");
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

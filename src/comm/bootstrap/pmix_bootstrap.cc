#include "comm/bootstrap/pmix_bootstrap.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "base/log.h"
#include "comm/bootstrap/boot_wire.h"
#include "comm/bootstrap/bootstrap_impl.h"

namespace loom::comm::internal {
namespace {

constexpr char kTokenKey[] = "loom.token";
constexpr char kHelloKey[] = "loom.hello";

// The one live PmixBootstrap, for the event handler (PMIx passes it no object of ours).
Mutex g_active_mu;
PmixBootstrap* g_active GUARDED_BY(g_active_mu) = nullptr;

std::string pmix_error(pmix_status_t rc) { return PMIx_Error_string(rc); }

// Failure events worth stopping the job for. Normal terminations (PMIX_EVENT_JOB_END) are not.
pmix_status_t kFailureEvents[] = {PMIX_ERR_LOST_CONNECTION,   PMIX_ERR_UNREACH,
                                  PMIX_ERR_PROC_ABORTED,      PMIX_ERR_PROC_ABORTING,
                                  PMIX_ERR_PROC_TERM_WO_SYNC, PMIX_EVENT_NODE_DOWN};

// Runs on PMIx's progress thread.
void on_pmix_event(size_t /*id*/, pmix_status_t status, const pmix_proc_t* source,
                   pmix_info_t info[], size_t ninfo, pmix_info_t* /*results*/, size_t /*nresults*/,
                   pmix_event_notification_cbfunc_fn_t cbfunc, void* cbdata) {
  std::string text;
  if (status == PMIX_ERR_LOST_CONNECTION || status == PMIX_ERR_UNREACH) {
    text = "lost connection to the PMIx server (mpirun/srun): " + pmix_error(status);
  } else {
    // The affected process, if the event names one; else the event's source.
    std::optional<pmix_rank_t> rank;
    for (size_t i = 0; i < ninfo; ++i)
      if (PMIX_CHECK_KEY(&info[i], PMIX_EVENT_AFFECTED_PROC) && info[i].value.type == PMIX_PROC &&
          info[i].value.data.proc != nullptr)
        rank = info[i].value.data.proc->rank;
    if (!rank && source != nullptr) rank = source->rank;
    text = rank && *rank < PMIX_RANK_VALID
               ? fmt::format("node {}: PMIx reported {}", *rank, pmix_error(status))
               : fmt::format("PMIx reported {}", pmix_error(status));
  }
  {
    MutexLock lock(g_active_mu);
    if (g_active != nullptr) g_active->on_failure(Status::peer_failed(text));
  }
  // Let other handlers (an MPI library's, say) see the event too.
  if (cbfunc != nullptr) cbfunc(PMIX_SUCCESS, nullptr, 0, nullptr, nullptr, cbdata);
}

// PMIx_Get of data that a fence with PMIX_COLLECT_DATA has made local. PMIX_OPTIONAL: look only
// in the local store, never ask the server. why: with mpirun --enable-recovery a fence succeeds
// among the survivors when a process died before entering it; asking the server for the dead
// process's data would then wait for it until a timeout instead of failing at once.
pmix_status_t get_local(const pmix_proc_t& proc, const char* key, pmix_value_t** val) {
  pmix_info_t info;
  PMIX_INFO_CONSTRUCT(&info);
  bool yes = true;
  PMIx_Info_load(&info, PMIX_OPTIONAL, &yes, PMIX_BOOL);
  pmix_status_t rc = PMIx_Get(&proc, key, &info, 1, val);
  PMIX_INFO_DESTRUCT(&info);
  return rc;
}

}  // namespace

Result<std::unique_ptr<PmixBootstrap>> PmixBootstrap::init(int64_t startup_ms) {
  pmix_proc_t me;
  pmix_status_t rc = PMIx_Init(&me, nullptr, 0);
  if (rc != PMIX_SUCCESS)
    return Status::io(
        fmt::format("PMIx_Init failed: {} (is this process started by mpirun or "
                    "srun --mpi=pmix?)",
                    pmix_error(rc)));
  int efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (efd < 0) {
    int err = errno;
    PMIx_Finalize(nullptr, 0);
    return Status::from_errno("eventfd", err);
  }
  // From here on the destructor finalizes PMIx.
  std::unique_ptr<PmixBootstrap> b(new PmixBootstrap(me, efd));
  {
    MutexLock lock(g_active_mu);
    if (g_active != nullptr)
      return Status::invalid_argument("a PMIx bootstrap already exists in this process");
    g_active = b.get();
  }

  rc = PMIx_Register_event_handler(kFailureEvents, std::size(kFailureEvents), nullptr, 0,
                                   on_pmix_event, nullptr, nullptr);
  // note: without a callback the call blocks and returns the handler's id, or an error (< 0).
  if (rc < 0)
    LOOM_WARN(
        "PMIx_Register_event_handler failed: {}; process failures are detected only by "
        "failing fences",
        pmix_error(rc));
  else
    b->handler_id_ = static_cast<size_t>(rc);

  pmix_proc_t wildcard;
  PMIX_LOAD_PROCID(&wildcard, me.nspace, PMIX_RANK_WILDCARD);
  pmix_value_t* val = nullptr;
  rc = PMIx_Get(&wildcard, PMIX_JOB_SIZE, nullptr, 0, &val);
  if (rc != PMIX_SUCCESS || val == nullptr)
    return Status::io(fmt::format("PMIx_Get({}) failed: {}", PMIX_JOB_SIZE, pmix_error(rc)));
  switch (val->type) {
    case PMIX_UINT32:
      b->size_ = val->data.uint32;
      break;
    case PMIX_UINT64:
      b->size_ = static_cast<uint32_t>(val->data.uint64);
      break;
    case PMIX_SIZE:
      b->size_ = static_cast<uint32_t>(val->data.size);
      break;
    case PMIX_INT:
      b->size_ = static_cast<uint32_t>(val->data.integer);
      break;
    default:
      break;
  }
  PMIX_VALUE_RELEASE(val);
  if (b->size_ == 0 || me.rank >= b->size_)
    return Status::internal(
        fmt::format("PMIx reports rank {} in a job of {} processes", me.rank, b->size_));

  if (me.rank == 0) {
    auto token = boot::random_token();
    if (!token) return token.status();
    b->token_ = *token;
    pmix_value_t v;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_STRING;
    v.data.string = b->token_.data();  // PMIx_Put copies the value
    rc = PMIx_Put(PMIX_GLOBAL, kTokenKey, &v);
    if (rc != PMIX_SUCCESS) return Status::io("PMIx_Put(loom.token) failed: " + pmix_error(rc));
  }
  // Every rank says it is here, so that a rank that never comes can be named.
  {
    pmix_value_t v;
    PMIX_VALUE_CONSTRUCT(&v);
    v.type = PMIX_UINT32;
    v.data.uint32 = 1;
    rc = PMIx_Put(PMIX_GLOBAL, kHelloKey, &v);
    if (rc != PMIX_SUCCESS) return Status::io("PMIx_Put(loom.hello) failed: " + pmix_error(rc));
  }
  rc = PMIx_Commit();
  if (rc != PMIX_SUCCESS) return Status::io("PMIx_Commit failed: " + pmix_error(rc));
  Status s = b->fence(/*collect=*/true, startup_ms);
  if (s.code() == StatusCode::kTimeout) {
    std::vector<uint32_t> missing = b->missing_from(kHelloKey);
    return Status::timeout(
        missing.empty()
            ? fmt::format("the job did not form within {} ms (bootstrap): a process did not "
                          "start Loom, and PMIx cannot say which",
                          startup_ms)
            : fmt::format("node {} did not join the job within {} ms (bootstrap; it is stopped, "
                          "hung or ended)",
                          fmt::join(missing, ", "), startup_ms));
  }
  if (!s) return b->explain_fence_failure(s, kHelloKey, "joining the job");
  if (me.rank != 0) {
    pmix_proc_t root;
    PMIX_LOAD_PROCID(&root, me.nspace, 0);
    val = nullptr;
    rc = get_local(root, kTokenKey, &val);
    if (rc != PMIX_SUCCESS || val == nullptr || val->type != PMIX_STRING ||
        val->data.string == nullptr) {
      if (val != nullptr) PMIX_VALUE_RELEASE(val);
      return Status::io("PMIx_Get(loom.token) from rank 0 failed: " + pmix_error(rc));
    }
    b->token_ = val->data.string;
    PMIX_VALUE_RELEASE(val);
  }
  return b;
}

PmixBootstrap::PmixBootstrap(const pmix_proc_t& me, int event_fd) : me_(me), event_fd_(event_fd) {}

PmixBootstrap::~PmixBootstrap() {
  if (handler_id_) PMIx_Deregister_event_handler(*handler_id_, nullptr, nullptr);
  {
    MutexLock lock(g_active_mu);
    if (g_active == this) g_active = nullptr;
  }
  pmix_status_t rc = PMIx_Finalize(nullptr, 0);
  if (rc != PMIX_SUCCESS) LOOM_DEBUG("PMIx_Finalize: {}", pmix_error(rc));
  ::close(event_fd_);
}

void PmixBootstrap::on_failure(Status s) {
  MutexLock lock(mu_);
  if (!failure_) failure_ = std::move(s);
  uint64_t one = 1;
  ssize_t n = ::write(event_fd_, &one, sizeof one);
  (void)n;
}

Status PmixBootstrap::handle_event() {
  uint64_t v;
  ssize_t n = ::read(event_fd_, &v, sizeof v);  // non-blocking
  (void)n;
  MutexLock lock(mu_);
  return failure_ ? *failure_ : Status::ok();
}

namespace {

// A fence's completion, shared with PMIx's callback, which may come after the waiter gave up.
struct FenceWait {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  pmix_status_t rc = PMIX_SUCCESS;
};

void fence_done(pmix_status_t status, void* cbdata) {
  auto* w = static_cast<std::shared_ptr<FenceWait>*>(cbdata);
  {
    std::lock_guard<std::mutex> g((*w)->mu);
    (*w)->rc = status;
    (*w)->done = true;
  }
  (*w)->cv.notify_all();
  delete w;
}

}  // namespace

Status PmixBootstrap::fence(bool collect, int64_t timeout_ms) {
  pmix_info_t info;
  PMIX_INFO_CONSTRUCT(&info);
  bool yes = true;
  if (collect) PMIx_Info_load(&info, PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
  // why: PMIx_Fence's own PMIX_TIMEOUT is not honoured by every server (Open MPI 4.1's mpirun
  // let a fence wait forever for a rank that hung before it), so the wait is bounded here.
  auto wait = std::make_shared<FenceWait>();
  auto* cb = new std::shared_ptr<FenceWait>(wait);
  // nullptr procs: every process of this namespace.
  pmix_status_t rc =
      PMIx_Fence_nb(nullptr, 0, collect ? &info : nullptr, collect ? 1 : 0, fence_done, cb);
  PMIX_INFO_DESTRUCT(&info);
  if (rc == PMIX_OPERATION_SUCCEEDED) {
    delete cb;
    return Status::ok();
  }
  if (rc != PMIX_SUCCESS) {
    delete cb;
  } else {
    std::unique_lock<std::mutex> lock(wait->mu);
    auto done = [&] { return wait->done; };
    if (timeout_ms > 0) {
      if (!wait->cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), done))
        return Status::timeout("PMIx_Fence did not complete");
    } else {
      wait->cv.wait(lock, done);
    }
    rc = wait->rc;
  }
  if (rc == PMIX_SUCCESS) return Status::ok();
  return Status::peer_failed(
      fmt::format("PMIx_Fence failed: {} (a process of the job died or the PMIx server is gone)",
                  pmix_error(rc)));
}

Status PmixBootstrap::explain_fence_failure(const Status& fence, const std::string& key,
                                            std::string_view what) {
  // why: the fence fails as soon as a process dies, often before the event that names it; so
  // wait a moment for the event, then ask which rank's contribution is missing.
  for (int i = 0; i < 100; ++i) {
    {
      MutexLock lock(mu_);
      if (failure_) return *failure_;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Status s = fence;
  if (!key.empty()) {
    std::vector<uint32_t> missing = missing_from(key);
    if (!missing.empty())
      s = Status::peer_failed(fmt::format("node {} left the job before {} ({})",
                                          fmt::join(missing, ", "), what, fence.message()));
  }
  on_failure(s);
  MutexLock lock(mu_);
  return *failure_;
}

namespace {

// The answers to the PMIx_Get_nb calls of missing_from(), shared with PMIx's callbacks, which
// may come after the caller stopped waiting.
struct GetWait {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> state;  // per rank: 0 waiting, 1 found, -1 not found
  size_t pending = 0;
};

struct GetCall {
  std::shared_ptr<GetWait> wait;
  uint32_t rank;
};

void get_done(pmix_status_t status, pmix_value_t* kv, void* cbdata) {
  std::unique_ptr<GetCall> call(static_cast<GetCall*>(cbdata));
  (void)kv;  // PMIx owns it and releases it after the callback
  {
    std::lock_guard<std::mutex> g(call->wait->mu);
    call->wait->state[call->rank] = status == PMIX_SUCCESS ? 1 : -1;
    --call->wait->pending;
  }
  call->wait->cv.notify_all();
}

}  // namespace

std::vector<uint32_t> PmixBootstrap::missing_from(const std::string& key) {
  // note: not PMIX_OPTIONAL: the local server asks the rank's server for the key (a direct
  // modex), which has it if the rank committed it, that is, reached the collective. Bounded
  // twice over: PMIX_TIMEOUT for servers that honour it, and our own wait for those that do not.
  auto wait = std::make_shared<GetWait>();
  wait->state.assign(size_, 0);
  pmix_info_t info;
  PMIX_INFO_CONSTRUCT(&info);
  int one = 1;
  PMIx_Info_load(&info, PMIX_TIMEOUT, &one, PMIX_INT);
  for (uint32_t r = 0; r < size_; ++r) {
    if (r == me_.rank) {
      wait->state[r] = 1;
      continue;
    }
    pmix_proc_t proc;
    PMIX_LOAD_PROCID(&proc, me_.nspace, r);
    {
      std::lock_guard<std::mutex> g(wait->mu);
      ++wait->pending;
    }
    auto* call = new GetCall{wait, r};
    if (PMIx_Get_nb(&proc, key.c_str(), &info, 1, get_done, call) != PMIX_SUCCESS) {
      delete call;
      std::lock_guard<std::mutex> g(wait->mu);
      --wait->pending;
      wait->state[r] = -1;
    }
  }
  PMIX_INFO_DESTRUCT(&info);
  std::unique_lock<std::mutex> lock(wait->mu);
  wait->cv.wait_for(lock, std::chrono::seconds(2), [&] { return wait->pending == 0; });
  std::vector<uint32_t> missing;
  for (uint32_t r = 0; r < size_; ++r)
    if (wait->state[r] != 1) missing.push_back(r);
  return missing;
}

Result<std::string> PmixBootstrap::get_blob(uint32_t rank, const std::string& key) {
  pmix_proc_t proc;
  PMIX_LOAD_PROCID(&proc, me_.nspace, rank);
  pmix_value_t* val = nullptr;
  pmix_status_t rc = get_local(proc, key.c_str(), &val);
  if (rc != PMIX_SUCCESS || val == nullptr) {
    if (val != nullptr) PMIX_VALUE_RELEASE(val);
    return Status::peer_failed(
        fmt::format("node {} did not contribute to {} (PMIx_Get: {}); it has probably died", rank,
                    key, pmix_error(rc)));
  }
  if (val->type != PMIX_BYTE_OBJECT || val->data.bo.size == 0) {
    PMIX_VALUE_RELEASE(val);
    return Status::malformed(fmt::format("PMIx key {} of node {} is not a Loom blob", key, rank));
  }
  std::string blob(val->data.bo.bytes, val->data.bo.size);
  PMIX_VALUE_RELEASE(val);
  return blob;
}

Result<std::vector<std::string>> PmixBootstrap::allgather(std::string_view mine, const Step& step) {
  {
    MutexLock lock(mu_);
    if (failure_) return *failure_;
  }
  std::string key = fmt::format("loom.ag.{}", next_seq_++);
  // The step goes with the data, so that nodes at different steps find out (boot_wire.h).
  std::string data =
      boot::encode_pmix_contribution({step.kind, std::string(step.what), std::string(mine)});
  pmix_value_t v;
  PMIX_VALUE_CONSTRUCT(&v);
  v.type = PMIX_BYTE_OBJECT;
  v.data.bo.bytes = data.data();
  v.data.bo.size = data.size();
  pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, key.c_str(), &v);
  if (rc != PMIX_SUCCESS)
    return Status::io(fmt::format("PMIx_Put({}) failed: {}", key, pmix_error(rc)));
  rc = PMIx_Commit();
  if (rc != PMIX_SUCCESS) return Status::io("PMIx_Commit failed: " + pmix_error(rc));
  Status s = fence(/*collect=*/true, step.wait_ms);
  if (s.code() == StatusCode::kTimeout) {
    std::vector<uint32_t> missing = missing_from(key);
    if (missing.empty())
      return Status::timeout(fmt::format(
          "{} did not complete within {} ms (a node did not reach it; PMIx cannot say which)",
          step.what, step.wait_ms));
    return Status::timeout(fmt::format("node {} did not reach {} within {} ms (stopped or hung)",
                                       fmt::join(missing, ", "), step.what, step.wait_ms));
  }
  if (!s) return explain_fence_failure(s, key, step.what);
  std::vector<std::string> out(size_);
  for (uint32_t r = 0; r < size_; ++r) {
    if (r == me_.rank) {
      out[r] = std::string(mine);
      continue;
    }
    auto blob = get_blob(r, key);
    if (!blob) return blob.status();
    Result<boot::PmixContribution> theirs = boot::decode_pmix_contribution(*blob);
    if (!theirs)
      return Status::malformed(
          fmt::format("PMIx key {} of node {}: {}", key, r, theirs.status().message()));
    if (theirs->kind != step.kind || theirs->what != step.what)
      return Status::peer_failed(fmt::format(
          "node {} is at {} ({}) while node {} is at {} ({}): every node must take part in the "
          "same collectives",
          r, theirs->what, boot::step_name(theirs->kind), me_.rank, step.what,
          boot::step_name(step.kind)));
    out[r] = std::move(theirs->data);
  }
  return out;
}

void PmixBootstrap::abort_job(std::string_view reason, NodeId culprit, int status) {
  (void)culprit;  // mpirun names the aborting process; the reason names the culprit
  std::string msg(reason);
  // nullptr procs: the whole namespace. The server kills the job, this process included.
  pmix_status_t rc = PMIx_Abort(status, msg.c_str(), nullptr, 0);
  if (rc != PMIX_SUCCESS) LOOM_WARN("PMIx_Abort failed: {}", pmix_error(rc));
}

Result<std::unique_ptr<Bootstrap>> make_pmix_bootstrap(const Config& config) {
  auto b = PmixBootstrap::init(config.get_int("STARTUP_TIMEOUT_MS"));
  if (!b) return b.status();
  return std::unique_ptr<Bootstrap>(std::move(*b));
}

}  // namespace loom::comm::internal

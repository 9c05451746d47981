#include "protocols/platform.h"

#include <fmt/format.h>

#include <chrono>
#include <thread>

#include "base/log.h"
#include "comm/completion.h"

namespace loom::protocols {

Platform::Platform(memory::PageFrames& frames, memory::PageTable& table, memory::Heap& heap,
                   hlrc::Hlrc& notices)
    : frames_(frames), table_(table), heap_(heap), notices_(notices) {
  notices_.set_foreign_pages([this](ProtocolId id, std::vector<memory::PageId> pages) {
    LOOM_CHECK(id < protocols_.size(), "write notices name protocol {} but this node has {}", id,
               protocols_.size());
    protocols_[id]->invalidate(std::move(pages));
  });
}

Platform::~Platform() = default;

void Platform::add(Protocol* protocol, std::unique_ptr<Protocol> owned) {
  LOOM_CHECK(protocols_.size() < kMaxProtocols, "more than {} protocols", kMaxProtocols);
  protocols_.push_back(protocol);
  if (owned) owned_.push_back(std::move(owned));
  heap_.set_protocol_count(static_cast<uint32_t>(protocols_.size()));
}

Status Platform::register_messages() {
  for (Protocol* p : protocols_)
    if (Status s = p->register_messages(); !s) return s;
  return Status::ok();
}

bool Platform::on_fault(void* addr, bool is_write) {
  comm::LoomWorkScope scope(&notices_.comm());  // the spin policy: not the application's work
  const memory::PageId page = frames_.page_of(addr);
  ProtocolId id = memory::kProtocolUnknown;
  if (memory::PageEntry* e = table_.find(page); e != nullptr) {
    MutexLock l(table_.lock_of(page));
    id = e->protocol;
  }
  if (id == memory::kProtocolUnknown) {
    memory::Heap::Resolved r = heap_.resolve(page);
    if (r.home == memory::kNotAllocated) return false;
    id = r.protocol;
  }
  LOOM_CHECK(id < protocols_.size(), "page {} names protocol {} but this node has {}", page, id,
             protocols_.size());
  return protocols_[id]->on_fault(addr, is_write);
}

void Platform::release(ReleaseKind kind) {
  // note: HLRC (id 0) last. The others' releases finish their own work (eager invalidations)
  // before it returns; HLRC's closes the interval whose notices the next acquirer receives,
  // with the pages the notice-using protocols wrote in it.
  {
    MutexLock l(release_mu_);
    const uint64_t seq = started_.load(std::memory_order_relaxed) + 1;
    started_.store(seq, std::memory_order_release);
    // note: looked at only once this release counts as started. A lazy unlock (locks.cc) that
    // saw `seq - 1` started relies on this release to cover its writes; had we looked before,
    // its writes could land between our look and our start, and neither would release them.
    bool work = false;
    for (const Protocol* p : protocols_) work = work || p->has_release_work(kind);
    // Nothing written here since the last release: the interval goes on. (Still through the
    // mutex: a release running on another thread may have taken this thread's pages, and they
    // must be announced before this release returns.)
    if (work) {
      comm::LoomWorkScope scope(&notices_.comm());  // the spin policy: not the application's work
      for (size_t k = protocols_.size(); k-- > 1;) protocols_[k]->release();
      const IntervalStamp next = notices_.next_interval();
      std::vector<PageWrite> written;
      for (size_t k = 1; k < protocols_.size(); ++k)
        protocols_[k]->close_interval(next, kind, &written);
      notices_.release_interval(next, std::move(written));
    }
    completed_.store(seq, std::memory_order_release);
  }
  for (const auto& fn : listeners_) fn(/*on_dispatcher=*/false);
}

bool Platform::must_release_now(ReleaseKind kind) const {
  for (size_t k = 1; k < protocols_.size(); ++k)
    if (protocols_[k]->has_release_work(kind)) return true;
  return false;
}

bool Platform::try_release_from_handler() {
  if (!release_mu_.try_lock()) return false;  // a release is running: its listeners follow it
  {
    const uint64_t seq = started_.load(std::memory_order_relaxed) + 1;
    started_.store(seq, std::memory_order_release);
    // note: HLRC's pages only. The lock service leaves a release for later only when no other
    // protocol had release work at the unlock (must_release_now); what they wrote since then
    // is not ordered before this release's acquirer, and waits for the next full release.
    if (notices_.has_release_work(ReleaseKind::kLock)) notices_.release_from_handler();
    completed_.store(seq, std::memory_order_release);
  }
  release_mu_.unlock();
  for (const auto& fn : listeners_) fn(/*on_dispatcher=*/true);
  return true;
}

void Platform::acquire() {
  for (Protocol* p : protocols_) p->acquire();
}

bool Platform::wants_collection() const {
  for (const Protocol* p : protocols_)
    if (p->wants_collection()) return true;
  return false;
}

VectorTime Platform::validated() const {
  MutexLock l(validated_mu_);
  return validated_;
}

void Platform::collect() {
  MutexLock c(collect_mu_);
  // note: what acquires have applied so far; validating afterwards covers at least that.
  VectorTime t = notices_.applied_time();
  for (Protocol* p : protocols_) p->validate();
  MutexLock l(validated_mu_);
  validated_ = std::move(t);
}

void Platform::drop_validated(const VectorTime& all_validated) {
  for (Protocol* p : protocols_) p->drop_validated(all_validated);
}

std::string Platform::dump_page(memory::PageId page) {
  ProtocolId id = memory::kProtocolUnknown;
  if (memory::PageEntry* e = table_.find(page); e != nullptr) {
    MutexLock l(table_.lock_of(page));
    id = e->protocol;
  }
  if (id >= protocols_.size()) return fmt::format("page {}: protocol not known here", page);
  // why: a protocol's dump_page reads the page's state as its fatal checks do, under the page's
  // stripe lock, which a caller from outside (a test's watchdog) does not hold. Tried for a
  // second only: a thread that hangs may hold it, and a dump must not hang too.
  Mutex& mu = table_.lock_of(page);
  for (int i = 0; i < 1000; ++i) {
    if (mu.try_lock()) {
      std::string s = protocols_[id]->dump_page(page);
      mu.unlock();
      return s;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return protocols_[id]->dump_page(page) + " (read without the page's lock: held elsewhere)";
}

}  // namespace loom::protocols

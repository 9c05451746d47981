// Platform: a node's set of protocols, seen by the layers around them as one.
//
// It is the node's fault target (each fault goes to the protocol of the faulting page, learned
// from the page table or, the first time, from the heap) and the synchronization layer's
// Consistency: release() and acquire() run every protocol's action, and the write notices that
// travel with lock grants and barrier messages are the notice core's (HLRC's notice store, the
// write-notice machinery of the generic core). A protocol that uses notices (lrc_mw) adds the
// pages it wrote to the interval a release closes (Protocol::close_interval), and an acquire
// hands it the pages the new notices name (Protocol::invalidate); the others ignore them.
//
// Thread safety: as Protocol and Consistency; add() only before the node starts.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "memory/fault.h"
#include "protocols/consistency.h"
#include "protocols/hlrc/hlrc.h"
#include "protocols/protocol.h"

namespace loom::protocols {

class Platform final : public memory::FaultTarget, public Consistency {
 public:
  // `notices` keeps the write notices and vector times (HLRC, protocol 0); it must outlive the
  // platform.
  Platform(memory::PageFrames& frames, memory::PageTable& table, memory::Heap& heap,
           hlrc::Hlrc& notices);
  ~Platform();
  Platform(const Platform&) = delete;
  Platform& operator=(const Platform&) = delete;

  // Adds the protocol with the next id. `owned` may be null when the caller keeps it (the
  // runtime and the simulator own their HLRC).
  void add(Protocol* protocol, std::unique_ptr<Protocol> owned);
  size_t size() const { return protocols_.size(); }
  Protocol& at(ProtocolId id) { return *protocols_.at(id); }
  const Protocol& at(ProtocolId id) const { return *protocols_.at(id); }

  Status register_messages();

  // FaultTarget: dispatches to the page's protocol.
  bool on_fault(void* addr, bool is_write) override;

  // Consistency.
  void release(ReleaseKind kind) override;
  uint64_t releases_started() const override { return started_.load(std::memory_order_acquire); }
  uint64_t releases_completed() const override {
    return completed_.load(std::memory_order_acquire);
  }
  // Only HLRC's release work may be left for a handler (its diffs go out without waiting);
  // every other protocol's releases now.
  bool must_release_now(ReleaseKind kind) const override;
  bool try_release_from_handler() override;
  void add_release_listener(std::function<void(bool on_dispatcher)> fn) override {
    listeners_.push_back(std::move(fn));
  }
  void acquire() override;
  VectorTime vector_time() const override { return notices_.vector_time(); }
  void write_notices_between(const VectorTime& vt, const VectorTime& upto,
                             ByteWriter& w) const override {
    notices_.write_notices_between(vt, upto, w);
  }
  void write_notices_for(const VectorTime& vt, ByteWriter& w) const override {
    notices_.write_notices_for(vt, w);
  }
  Status store_notices(ByteReader& r) override { return notices_.store_notices(r); }
  void gc(const VectorTime& floor) override { notices_.gc(floor); }
  bool wants_collection() const override;
  VectorTime validated() const override;
  void collect() override;
  void drop_validated(const VectorTime& all_validated) override;
  void write_barrier_mail(std::vector<MailItem>* out) override { notices_.write_barrier_mail(out); }
  Status take_barrier_mail(uint32_t from, std::span<const std::byte> blob) override {
    return notices_.take_barrier_mail(from, blob);
  }

  // The page's protocol state, for diagnostics from outside the protocols (a watchdog): read
  // under the page's stripe lock, so never call it with that lock held.
  std::string dump_page(memory::PageId page);

 private:
  memory::PageFrames& frames_;
  memory::PageTable& table_;
  memory::Heap& heap_;
  hlrc::Hlrc& notices_;
  Mutex release_mu_;  // one release at a time: intervals are per node
  // Releases that began / ended (written under release_mu_).
  std::atomic<uint64_t> started_{0}, completed_{0};
  std::vector<std::function<void(bool)>> listeners_;  // set before the node starts
  Mutex collect_mu_;                                  // one collection at a time
  mutable Mutex validated_mu_;
  VectorTime validated_ GUARDED_BY(validated_mu_);  // every copy covered these notices
  std::vector<Protocol*> protocols_;
  std::vector<std::unique_ptr<Protocol>> owned_;
};

}  // namespace loom::protocols

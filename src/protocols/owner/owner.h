// Owner-based single-writer protocols: sc_mrsw (sequential consistency, Li & Hudak) and erc_sw
// (eager release consistency, DSM-PM2's erc_sw). docs/protocols/sc_mrsw.md and erc_sw.md have
// the state tables and message formats; in short:
//
//   - Every page has one *owner*, the only node that may write it, and a *copyset* of nodes
//     holding read-only copies. The page's home is its first owner.
//   - Dynamic distributed manager: each node keeps a probable owner per page. A request goes to
//     the probable owner, which serves it if it owns the page, queues it if it is itself waiting
//     to become owner, and forwards it otherwise; forwarding a write request points the
//     forwarder's probable owner at the requester (path compression).
//   - Read request: the owner adds the requester to the copyset and sends a copy.
//   - Write request: the owner invalidates every copy (invalidation round, acknowledged), then
//     sends the page with ownership; the new owner starts with an empty copyset.
//   - sc_mrsw: the owner stops writing (write-protects) when it hands out a read copy, and must
//     invalidate the copyset before it writes again: every read sees the last write.
//   - erc_sw: the owner keeps writing while copies exist; those copies may be stale until the
//     owner's next release, which invalidates the copyset of every page written meanwhile
//     (eagerly, waiting for the acknowledgements). Correct for data-race-free programs.
//   - Epochs: every invalidation round ends an epoch of the page. A copy carries its epoch and a
//     node refuses a copy from an epoch it has already seen invalidated (messages may be
//     reordered), and asks again.
//   - The hold: a node that gets write access for a waiting thread (a write grant, the end of its
//     own round) queues every request for the page until that thread has resumed with its
//     access, and then for LOOM_OWNER_HOLD_US more, so the faulting store executes before the
//     page can be taken away (without it a spinning reader elsewhere livelocks a writer).
//
// Threads: on_fault(), release() on application threads (they wait on the page's stripe
// condition); the handlers never wait and touch pages only through the system view.
#pragma once

#include <atomic>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "base/thread_annotations.h"
#include "protocols/dirty_list.h"
#include "protocols/protocol.h"

namespace loom::protocols::owner {

enum class Mode : uint8_t {
  kSequential,    // sc_mrsw
  kEagerRelease,  // erc_sw
};

// Page states (PageEntry::state).
enum class PageState : uint8_t {
  kUnknown = 0,    // never used here
  kInvalid = 1,    // no copy; prob_owner says where to ask
  kReadCopy = 2,   // a read-only copy; not the owner
  kOwner = 3,      // this node owns the page (prot says what local threads may do)
  kOwnerBusy = 4,  // owner running an invalidation round (transfer, upgrade or release)
};

struct Counters {
  std::atomic<uint64_t> read_faults{0}, write_faults{0}, refaults{0}, requests_sent{0},
      requests_forwarded{0}, requests_queued{0}, copies_sent{0}, ownership_transfers{0},
      invalidation_rounds{0}, invalidations_sent{0}, invalidations_received{0}, stale_copies{0},
      release_rounds{0}, fault_ns{0}, fetch_wait_ns{0};
};

class OwnerProtocol final : public Protocol {
 public:
  OwnerProtocol(const Core& core, Mode mode);
  ~OwnerProtocol() override;

  Status register_messages() override;
  bool on_fault(void* addr, bool is_write) override;
  void release() override;
  void acquire() override {}
  bool has_release_work(ReleaseKind) const override {
    return mode_ == Mode::kEagerRelease && !dirty_.empty();
  }
  CounterList counter_list() const override;
  std::string dump_page(memory::PageId page) override;

  const Counters& counters() const { return counters_; }

 private:
  // For dump_page: the state of page `other`, read under its stripe lock if that is free.
  std::string other_state(memory::PageId page, memory::PageId other);
  struct Out {  // a message to send once the stripe lock is released
    comm::NodeId dst;
    comm::MsgType type;
    std::vector<std::byte> payload;
  };
  struct Request {
    uint32_t requester;
    bool write;
  };
  struct Round {
    uint32_t acks_left = 0;
    int32_t requester = -1;  // the new owner, or this node (upgrade, release)
  };
  // What is going on for a page beyond its entry: guarded by the page's stripe lock (the map
  // itself by work_mu_).
  struct Work {
    bool want_write = false;      // this node's outstanding request asks for ownership
    std::vector<Request> queued;  // requests waiting for this node to own the page / end a round
    bool in_round = false;
    Round round;
    // A local thread is about to use the page it was waiting for (a write grant arrived, or this
    // node's own round ended): requests for the page queue until that thread has resumed and the
    // hold has passed (end_hold, then the serve message).
    bool holding = false;
    bool serve_sent = false;
    int64_t hold_until = 0;
    uint32_t waiting_busy = 0;   // local threads waiting for a round or another's request
    uint32_t waiting_reply = 0;  // local threads waiting for this node's request
  };

  using Lock = MutexLock;
  Work& work(memory::PageId page) EXCLUDES(work_mu_);
  Work* find_work(memory::PageId page) EXCLUDES(work_mu_);
  void init_entry(memory::PageId page, memory::PageEntry& e);

  void handle_request(memory::PageId page, memory::PageEntry& e, Request r, std::vector<Out>* out);
  void serve_read(memory::PageId page, memory::PageEntry& e, uint32_t requester,
                  std::vector<Out>* out);
  void start_round(memory::PageId page, memory::PageEntry& e, int32_t requester,
                   std::vector<Out>* out);
  void finish_round(memory::PageId page, memory::PageEntry& e, std::vector<Out>* out);
  void serve_queued(memory::PageId page, memory::PageEntry& e, std::vector<Out>* out);
  // A waiting local thread gets the page: hold requests for it (see Work::holding).
  void hold(Work& w) { w.holding = true; }
  // The thread resumed: serve what queued once the hold time has passed.
  void end_hold(memory::PageId page, Work& w, std::vector<Out>* out);
  // Sends the serve message to this node (once until it is handled).
  void post_serve(memory::PageId page, Work& w, std::vector<Out>* out);
  void add_copy(memory::PageEntry& e, uint32_t node);
  bool copies_elsewhere(const memory::PageEntry& e) const;
  void set_prot(memory::PageId page, memory::PageEntry& e, memory::Prot prot);
  void mark_dirty(memory::PageId page);
  std::vector<std::byte> grant_payload(memory::PageId page, const memory::PageEntry& e,
                                       uint32_t epoch, bool write);
  void flush(std::vector<Out>& out);

  Status on_request(comm::Incoming& in, bool write);
  Status on_grant(comm::Incoming& in);
  Status on_inval(comm::Incoming& in);
  Status on_ack(comm::Incoming& in);
  Status on_serve(comm::Incoming& in);

  comm::Comm& comm_;
  memory::PageFrames& frames_;
  memory::PageTable& table_;
  const ProtocolId id_;
  const Mode mode_;
  const comm::NodeId me_;
  const uint32_t nodes_;
  const int64_t hold_ns_;
  const comm::MsgType kReadReq, kWriteReq, kGrant, kInval, kAck, kServe;
  mutable Counters counters_;

  Mutex work_mu_;
  std::unordered_map<memory::PageId, Work> work_ GUARDED_BY(work_mu_);

  // erc_sw: owned pages written while copies existed since the last release.
  DirtyList dirty_;
  Mutex release_mu_;
};

}  // namespace loom::protocols::owner

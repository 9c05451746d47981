// Protocol: one consistency protocol of the platform, and the registry that names them.
//
// Loom is a protocol platform in the sense of DSM-PM2 (../docs/protocols/README.md): a protocol
// is a set of actions written against a generic core that every protocol shares — the page table
// (memory::PageTable: state, home, probable owner, copyset, twin, version), access rights
// (memory::PageFrames::protect), messaging (comm::Comm) and the write-notice machinery that
// travels with synchronization (Consistency, provided by the node's Platform). DSM-PM2's eight
// actions map onto this interface as follows:
//
//   read fault, write fault       on_fault(addr, is_write)          application thread, may wait
//   read/write/invalidate server,  handlers of the protocol's own     server thread, never wait
//   receive page                   message types (register_messages)
//   release, acquire              release(), acquire()               application thread, may wait
//
// Each allocation names the protocol that manages its pages (loom::AllocOptions::protocol,
// loom_alloc_attr_t::protocol); the job's default comes from LOOM_PROTOCOL. Several protocols
// are active in one program at once; the Platform sends each fault to the page's protocol and
// each release/acquire to all of them.
//
// Protocols are registered by name before loom::init(); built-in ones first, in a fixed order,
// then any registered by the program (every node must register the same ones in the same order;
// the runtime checks it at start-up). A protocol's id is its index in that list; it owns the
// message types [kProtocols + id * kMsgTypesPerProtocol, +kMsgTypesPerProtocol).
//
// Thread safety: register_protocol() before init, from one thread. A Protocol's methods as above.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/config.h"
#include "comm/comm.h"
#include "memory/frames.h"
#include "memory/heap.h"
#include "memory/page_table.h"
#include "protocols/consistency.h"

namespace loom::protocols {

using memory::ProtocolId;

inline constexpr size_t kMaxProtocols = 12;
// HLRC's id: the first built-in protocol, which keeps the node's write notices (Platform).
inline constexpr ProtocolId kHlrcId = 0;
inline constexpr comm::MsgType kMsgTypesPerProtocol = 8;

// What a protocol instance is built from: its node's generic core, and its own id.
struct Core {
  comm::Comm& comm;
  memory::PageFrames& frames;
  memory::PageTable& table;
  memory::Heap& heap;
  ProtocolId id;
  const Config* config;  // the node's configuration; null in the simulator (use defaults)

  // The i-th message type of this protocol (i < kMsgTypesPerProtocol).
  comm::MsgType msg(uint32_t i) const;
};

// A counter a protocol reports (name, value); times are in nanoseconds and named "*_ns".
using CounterList = std::vector<std::pair<std::string, uint64_t>>;
// A statistics counter's value (counters are updated and read without ordering).
inline uint64_t relaxed(const std::atomic<uint64_t>& a) {
  return a.load(std::memory_order_relaxed);
}

class Protocol {
 public:
  virtual ~Protocol() = default;

  // Registers the protocol's message types; called on every node before the start-up barrier.
  virtual Status register_messages() = 0;
  // Read or write fault on a page of this protocol that the application view refused; returns
  // once the access may be retried, or false if `addr` is not live shared memory (the fault is
  // passed on). Application threads (the SIGSEGV handler); may wait.
  virtual bool on_fault(void* addr, bool is_write) = 0;
  // The node releases (a lock release, a barrier arrival): after it returns, writes made on this
  // node before the call are visible to a node that acquires afterwards. Application threads.
  virtual void release() = 0;
  // The node acquired: writes released before the matching release must become visible.
  // Application threads.
  virtual void acquire() = 0;
  // Whether release() and close_interval(`kind`, ...) have anything to do (pages written here
  // since the last release, say). A release calls every protocol of the platform and most have
  // nothing to do, so the platform skips the release altogether when none has. Must not wait.
  // Default: always.
  virtual bool has_release_work(ReleaseKind kind) const {
    (void)kind;
    return true;
  }

  // For protocols built on the write-notice machinery (lrc_mw, single_owner). A release closes
  // the node's interval: after every protocol's release(), each one appends the pages it wrote
  // in the interval, labelled `next`, to `written` (with the blocks written, if it tracks
  // them); they go into the interval's write notice. `kind` says what the release is for.
  // Application threads (one release at a time per node). Default: none.
  virtual void close_interval(const IntervalStamp& next, ReleaseKind kind,
                              std::vector<PageWrite>* written) {
    (void)next;
    (void)kind;
    (void)written;
  }
  // An acquire raised PageEntry::required of these pages of this protocol (write notices named
  // them) and or-ed the blocks the notices name into PageEntry::stale_blocks: invalidate the
  // copies that lack those writes. Application threads. Default: nothing.
  virtual void invalidate(std::vector<memory::PageId> pages) { (void)pages; }
  // Collection at barriers (Consistency::collect): whether this protocol wants one; bring every
  // copy this node uses up to the notices applied so far (application thread, may wait); drop
  // what every node has validated up to `all_validated` (never waits). Defaults: nothing.
  virtual bool wants_collection() const { return false; }
  virtual void validate() {}
  virtual void drop_validated(const VectorTime& all_validated) { (void)all_validated; }

  virtual CounterList counter_list() const { return {}; }
  // One line about `page` for fatal errors.
  virtual std::string dump_page(memory::PageId page) = 0;
};

using ProtocolFactory = std::function<std::unique_ptr<Protocol>(const Core&)>;

// Adds a protocol under `name` ([a-z0-9_]+, unique); fails once loom::init() has built the
// node's protocols or when kMaxProtocols are registered.
Status register_protocol(std::string name, ProtocolFactory factory);
// Every registered name, in id order (built-in ones first).
std::vector<std::string> protocol_names();
// The id of `name`, or kProtocolUnknown.
ProtocolId protocol_id(std::string_view name);
// A peer's message about `page` (`what` it is, for the error) reached protocol `mine`'s
// handler: kMalformed if the page belongs to another protocol (a page not yet placed here is
// anyone's). The caller holds the page's stripe lock.
Status check_page_protocol(memory::PageId page, const memory::PageEntry& e, ProtocolId mine,
                           std::string_view what);
// Sets `pages` to `prot` in the application view, one call per run of consecutive pages.
void protect_runs(memory::PageFrames& frames, std::vector<memory::PageId> pages, memory::Prot prot);

// Calls fn(batch) for consecutive batches of at most kStripeBatch of `pages` (sorted by the
// caller), holding the stripe locks of the batch: a thread holds a bounded number of stripe
// locks, and every page of a batch is examined and changed under its own stripe.
inline constexpr size_t kStripeBatch = 32;
void in_stripe_batches(memory::PageTable& table, const std::vector<memory::PageId>& pages,
                       const std::function<void(const std::vector<memory::PageId>&)>& fn);

// Home-based protocols hold a page request until the diffs it needs have arrived. Removes from
// held[page] every entry (with a `need` VersionVec) that `have` now covers and returns them in
// arrival order; drops the page's list once empty. The caller holds the map's lock.
template <class Held>
std::vector<Held> take_covered(std::unordered_map<memory::PageId, std::vector<Held>>& held,
                               memory::PageId page, const memory::VersionVec& have) {
  std::vector<Held> out;
  auto it = held.find(page);
  if (it == held.end()) return out;
  std::vector<Held> rest;
  for (Held& h : it->second) (have.covers(h.need) ? out : rest).push_back(std::move(h));
  if (rest.empty())
    held.erase(it);
  else
    it->second = std::move(rest);
  return out;
}

// Builds protocol `id` for a node. REQUIRES: id < protocol_names().size().
std::unique_ptr<Protocol> make_protocol(ProtocolId id, const Core& core);
// Called when a node has built its protocols: later registrations are refused.
void freeze_protocols();

}  // namespace loom::protocols

// Consistency: what the synchronization layer needs from a protocol.
//
// A lock grant or a barrier release carries the protocol's consistency information (for HLRC,
// write notices); the releasing side writes it for the acquirer's vector time, the acquiring
// side stores it when the message arrives (on the server thread) and applies it in acquire()
// (on the application thread that acquired).
//
// Thread safety: release()/acquire() from application threads; the others from any thread,
// including message handlers (they never block).
#pragma once

#include <functional>

#include "protocols/hlrc/notices.h"

namespace loom::protocols {

using hlrc::ByteReader;
using hlrc::ByteWriter;
using hlrc::IntervalStamp;
using hlrc::PageWrite;
using hlrc::VectorTime;

// What a release is for. Protocols that may delay sending a write until someone asks for it
// (hybrid) keep them across lock releases, and send everything at a barrier, where every node
// is about to read what the others wrote.
enum class ReleaseKind : uint8_t {
  kLock,     // a lock release (and a condition variable's, which releases its lock)
  kBarrier,  // a barrier arrival, a thread's creation or end, an explicit fence
};

class Consistency {
 public:
  virtual ~Consistency() = default;
  // Ends this node's interval (makes its writes available to later acquirers).
  virtual void release(ReleaseKind kind) = 0;

  // Releases when they matter (docs/protocols/hlrc.md, "Lazy releases"): the threads of a node
  // share its memory, so a lock whose token stays on the node needs no release at its unlock.
  // The lock service releases when the token leaves the node instead; these let it know when a
  // release that covers an unlock has happened, and run one from a message handler.
  //
  // Releases are serialized per node; started() counts those that began, completed() those that
  // ended. A release that begins after a write covers it once it ends: a write made when
  // releases_started() was s is released once releases_completed() > s.
  virtual uint64_t releases_started() const { return 0; }
  virtual uint64_t releases_completed() const { return 0; }
  // True if a release must run now, on the calling application thread: part of the release work
  // cannot be left for a message handler (it may wait). Implementations without lazy releases
  // always say true.
  virtual bool must_release_now(ReleaseKind kind) const {
    (void)kind;
    return true;
  }
  // From a message handler (never waits): releases what a handler can (the pages whose release
  // needs no waiting), if no release is in progress. False if one is: the release listeners run
  // when it ends.
  virtual bool try_release_from_handler() { return false; }
  // `fn` runs after every release, on the thread that released (`on_dispatcher`: a message
  // handler, which must not wait), with no lock of the protocols held. Before the node starts.
  virtual void add_release_listener(std::function<void(bool on_dispatcher)> fn) { (void)fn; }
  // Brings this node's memory up to everything stored so far.
  virtual void acquire() = 0;
  virtual VectorTime vector_time() const = 0;
  // Appends what a node with vector time `vt` lacks.
  virtual void write_notices_for(const VectorTime& vt, ByteWriter& w) const = 0;
  // The same, only up to `upto` (a synchronization object's view): the records a node at `vt`
  // lacks of the intervals `upto` covers.
  virtual void write_notices_between(const VectorTime& vt, const VectorTime& upto,
                                     ByteWriter& w) const {
    (void)upto;
    write_notices_for(vt, w);
  }
  // Stores information from a grant or a release; kMalformed if it does not parse.
  virtual Status store_notices(ByteReader& r) = 0;
  // Every node holds everything up to `floor`.
  virtual void gc(const VectorTime& floor) = 0;

  // Collection of state that needs every node's cooperation (lrc_mw's diffs), driven by
  // barriers. A barrier arrival says whether this node wants a collection and up to which
  // vector time it has validated its copies (validated(): an empty vector means nothing); when
  // some node of an episode wanted one, the release asks every node to collect() (validate its
  // copies: application thread, may wait), and every release tells every node the element-wise
  // minimum of what all nodes have validated (drop_validated(): any thread, never waits).
  virtual bool wants_collection() const { return false; }
  virtual VectorTime validated() const { return {}; }
  virtual void collect() {}
  virtual void drop_validated(const VectorTime& all_validated) { (void)all_validated; }

  // Barrier mail: what a node sends other nodes through a barrier instead of messages of its
  // own (HLRC: copies of pages a home wrote, for the nodes that read them, and a reader's
  // "stop sending me this page"). A barrier arrival carries the node's mail
  // (write_barrier_mail, application thread, after its release); the release that ends the
  // episode delivers each item to its destination, where take_barrier_mail stores it before
  // any waiter of the episode acquires (any thread, never waits).
  struct MailItem {
    uint32_t node;  // the destination (write) or the sender (take)
    std::vector<std::byte> blob;
  };
  virtual void write_barrier_mail(std::vector<MailItem>* out) { (void)out; }
  virtual Status take_barrier_mail(uint32_t from, std::span<const std::byte> blob) {
    (void)from;
    (void)blob;
    return Status::ok();
  }
};

}  // namespace loom::protocols

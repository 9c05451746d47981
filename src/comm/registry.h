// The registry of message types: for each type id its name, its handler and a printer for traces.
//
// Handler contract (see docs/comm.md):
//   - Handlers run on the node's server thread (the thread inside Comm::poll()), never on an
//     application thread, one at a time.
//   - They must not block: no waiting on a Completion, a condition or a lock held across remote
//     operations. They may send, reply and start one-sided operations.
//   - The payload is borrowed: Incoming::payload() is valid until the handler returns. To keep
//     it, call Incoming::take_payload() (moves the buffer when the transport allocated it,
//     copies otherwise).
//   - A handler returns non-OK when the message is malformed (wrong size, impossible values);
//     Comm then reports the sender and type and stops the job. It never crashes the server
//     thread or leaves state half-updated.
//
// Thread safety: add() may be called from any thread at any time (typically at start-up, before
// peers can send the type); lookups are lock-free and safe from any thread.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>

#include "comm/types.h"
#include "comm/wire.h"
#include "loom/status.h"

namespace loom::comm {

// Where to send the reply to a request. Cheap to copy; can be kept by a state machine and used
// later, from any thread, with Comm::reply().
struct ReplyTo {
  NodeId node = kNoNode;
  uint64_t request_id = 0;
  MsgType type = 0;
  // A thread of the requester waits for the reply, polling (WireHeader::kFlagWaiter).
  bool waiter = false;
  bool valid() const { return request_id != 0; }
};

class Incoming {
 public:
  Incoming(const WireHeader& h, std::span<const std::byte> payload, Buffer* owned)
      : header_(h), payload_(payload), owned_(owned) {}

  NodeId src() const { return header_.src; }
  MsgType type() const { return header_.type; }
  bool is_request() const { return header_.request_id != 0; }
  ReplyTo reply_to() const {
    return {header_.src, header_.request_id, header_.type, header_.for_waiter()};
  }
  std::span<const std::byte> payload() const { return payload_; }
  // Moves the payload out (no copy when the transport allocated it). payload() is empty after.
  Buffer take_payload();

  // The payload as a trivially copyable struct T. Fails (malformed) unless the size is exact.
  template <typename T>
  Result<T> as() const {
    static_assert(std::is_trivially_copyable_v<T>);
    if (payload_.size() != sizeof(T)) return size_mismatch(sizeof(T));
    T v;
    std::memcpy(&v, payload_.data(), sizeof(T));
    return v;
  }

 private:
  Status size_mismatch(size_t expected) const;

  WireHeader header_;
  std::span<const std::byte> payload_;
  Buffer* owned_;
};

using Handler = std::function<Status(Incoming&)>;
using Printer = std::function<std::string(std::span<const std::byte>)>;

struct MsgTypeInfo {
  MsgType id = 0;
  std::string name;
  Handler handler;  // empty for reply-only types
  Printer printer;  // never empty once registered (a default prints the size and first bytes)
};

class MessageRegistry {
 public:
  MessageRegistry();
  ~MessageRegistry();

  // Registers type `id`. Errors: id out of range, already registered, empty name.
  Status add(MsgType id, std::string name, Handler handler, Printer printer = {});

  // Registers a type whose payload is exactly one T; the handler gets the decoded T.
  template <typename T>
  Status add_typed(MsgType id, std::string name, std::function<Status(const T&, Incoming&)> fn,
                   std::function<std::string(const T&)> print = {}) {
    static_assert(std::is_trivially_copyable_v<T>);
    Printer printer;
    if (print) {
      printer = [print](std::span<const std::byte> p) -> std::string {
        if (p.size() != sizeof(T)) return "(wrong size " + std::to_string(p.size()) + ")";
        T v;
        std::memcpy(&v, p.data(), sizeof(T));
        return print(v);
      };
    }
    return add(
        id, std::move(name),
        [fn](Incoming& in) -> Status {
          Result<T> v = in.as<T>();
          if (!v) return v.status();
          return fn(*v, in);
        },
        std::move(printer));
  }

  // nullptr if `id` is not registered.
  const MsgTypeInfo* find(MsgType id) const;
  // The registered name, or "type#<id>".
  std::string name_of(MsgType id) const;

 private:
  std::array<std::atomic<const MsgTypeInfo*>, kMaxMsgTypes> types_;
};

// Default printer: "<n> bytes: 0a 1b ..." (first 16 bytes).
std::string hex_preview(std::span<const std::byte> bytes);

}  // namespace loom::comm

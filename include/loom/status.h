// Status and Result: how Loom reports recoverable errors.
//
// A Status is either OK or carries a code, grouped by what failed (argument, node, link, message,
// resource), and a message naming the problem. Result<T> is a T or a non-OK Status.
//
// Thread safety: values; safe to copy and move between threads.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace loom {

enum class StatusCode : unsigned char {
  kOk = 0,
  kInvalidArgument,  // the caller passed something wrong (argument, config value, size)
  kNotFound,         // a named thing does not exist (program, message type, region)
  kPeerFailed,       // a node died, became unreachable or stopped responding
  kMalformed,        // a message or wire frame failed validation
  kRefused,          // a peer or process outside the job was refused
  kResource,         // out of memory, descriptors, or an OS limit
  kTimeout,          // an operation did not finish in time
  kIo,               // a system call failed
  kInternal,         // a bug in Loom
};

std::string_view to_string(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string msg) : code_(code), msg_(std::move(msg)) {}

  static Status ok() { return {}; }
  static Status invalid_argument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status peer_failed(std::string m) { return {StatusCode::kPeerFailed, std::move(m)}; }
  static Status malformed(std::string m) { return {StatusCode::kMalformed, std::move(m)}; }
  static Status refused(std::string m) { return {StatusCode::kRefused, std::move(m)}; }
  static Status resource(std::string m) { return {StatusCode::kResource, std::move(m)}; }
  static Status timeout(std::string m) { return {StatusCode::kTimeout, std::move(m)}; }
  static Status io(std::string m) { return {StatusCode::kIo, std::move(m)}; }
  static Status internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  // An I/O error from errno, naming the call: "connect(/tmp/x): No such file or directory".
  static Status from_errno(std::string_view what, int err);

  bool is_ok() const { return code_ == StatusCode::kOk; }
  explicit operator bool() const { return is_ok(); }
  StatusCode code() const { return code_; }
  const std::string& message() const { return msg_; }
  // "peer failed: node 2 ..." (or "OK").
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string msg_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status s) : v_(std::move(s)) {}     // NOLINT: implicit by design

  bool is_ok() const { return v_.index() == 0; }
  explicit operator bool() const { return is_ok(); }
  // REQUIRES: is_ok().
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  Status status() const { return is_ok() ? Status::ok() : std::get<1>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace loom

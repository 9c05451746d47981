#include "loom/status.h"

#include <cstring>

namespace loom {

std::string_view to_string(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kNotFound:
      return "not found";
    case StatusCode::kPeerFailed:
      return "peer failed";
    case StatusCode::kMalformed:
      return "malformed";
    case StatusCode::kRefused:
      return "refused";
    case StatusCode::kResource:
      return "out of resources";
    case StatusCode::kTimeout:
      return "timeout";
    case StatusCode::kIo:
      return "I/O error";
    case StatusCode::kInternal:
      return "internal error";
  }
  return "unknown status";
}

Status Status::from_errno(std::string_view what, int err) {
  return io(std::string(what) + ": " + std::strerror(err));
}

std::string Status::to_string() const {
  if (is_ok()) return "OK";
  std::string s(loom::to_string(code_));
  if (!msg_.empty()) s += ": " + msg_;
  return s;
}

}  // namespace loom

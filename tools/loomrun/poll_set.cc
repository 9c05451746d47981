#include "poll_set.h"

#include <cerrno>

namespace loom::loomrun {

Status PollSet::wait(int timeout_ms) {
  int n = ::poll(fds_.data(), fds_.size(), timeout_ms);
  if (n < 0) return errno == EINTR ? Status::ok() : Status::from_errno("poll", errno);
  for (size_t i = 0; i < fds_.size() && n > 0; ++i) {
    if (fds_[i].revents == 0) continue;
    --n;
    handlers_[i](fds_[i].revents);
  }
  return Status::ok();
}

}  // namespace loom::loomrun

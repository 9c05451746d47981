// PollSet: one round of poll(2) over descriptors that each carry their handler.
//
// loomrun's event loop rebuilds the set every iteration from its components (signals, broker,
// output), so a component that closes a descriptor simply does not add it next time. Handlers
// run in the order descriptors were added; a handler must tolerate that an earlier handler of the
// same round changed its object's state (closed it, say).
//
// Thread safety: one thread.
#pragma once

#include <poll.h>

#include <functional>
#include <vector>

#include "loom/status.h"

namespace loom::loomrun {

class PollSet {
 public:
  using Handler = std::function<void(short revents)>;

  void add(int fd, short events, Handler handler) {
    fds_.push_back(pollfd{fd, events, 0});
    handlers_.push_back(std::move(handler));
  }
  // Waits up to `timeout_ms` (-1: no limit) and runs the handlers of the ready descriptors. An
  // interrupted wait (EINTR) is not an error: it returns OK having run nothing.
  Status wait(int timeout_ms);
  void clear() {
    fds_.clear();
    handlers_.clear();
  }
  bool empty() const { return fds_.empty(); }

 private:
  std::vector<pollfd> fds_;
  std::vector<Handler> handlers_;
};

}  // namespace loom::loomrun

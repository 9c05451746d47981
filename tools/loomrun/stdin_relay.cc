#include "stdin_relay.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace loom::loomrun {

Result<StdinRelay> StdinRelay::create() {
  StdinRelay r;
  if (!::isatty(STDIN_FILENO)) {
    r.child_fd_ = STDIN_FILENO;
    return r;
  }
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return Status::from_errno("pipe2", errno);
  r.child_end_.reset(p[0]);
  r.pipe_w_.reset(p[1]);
  ::fcntl(p[1], F_SETFL, ::fcntl(p[1], F_GETFL) | O_NONBLOCK);
  r.child_fd_ = p[0];
  r.relaying_ = true;
  return r;
}

void StdinRelay::add_to(PollSet* ps) {
  if (!relaying_) return;
  if (!eof_ && buffered_.size() < kMaxBuffered)
    ps->add(STDIN_FILENO, POLLIN, [this](short) { on_input(); });
  if (!buffered_.empty()) ps->add(pipe_w_.get(), POLLOUT, [this](short) { on_output(); });
}

void StdinRelay::on_input() {
  if (!relaying_ || eof_) return;
  char buf[4096];
  ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    eof_ = true;  // end of input (or an error reading it): the node sees end of file
    if (buffered_.empty()) finish();
    return;
  }
  buffered_.append(buf, static_cast<size_t>(n));
  on_output();
}

void StdinRelay::on_output() {
  if (!relaying_) return;
  while (!buffered_.empty()) {
    ssize_t n = ::write(pipe_w_.get(), buffered_.data(), buffered_.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n < 0) {  // EPIPE: the node closed its stdin or ended; the rest is not wanted
      finish();
      return;
    }
    buffered_.erase(0, static_cast<size_t>(n));
  }
  if (eof_) finish();
}

void StdinRelay::finish() {
  relaying_ = false;
  buffered_.clear();
  pipe_w_.reset();
}

}  // namespace loom::loomrun

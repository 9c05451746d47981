#include "output.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>

#include "sys.h"

namespace loom::loomrun {

void OutputForwarder::add(uint32_t rank, UniqueFd out, UniqueFd err) {
  streams_.push_back(std::make_unique<Stream>(Stream{rank, std::move(out), STDOUT_FILENO, {}}));
  streams_.push_back(std::make_unique<Stream>(Stream{rank, std::move(err), STDERR_FILENO, {}}));
}

void OutputForwarder::add_to(PollSet* ps) {
  for (auto& s : streams_) {
    if (!s->fd.valid()) continue;
    Stream* raw = s.get();
    ps->add(s->fd.get(), POLLIN, [this, raw](short) { on_readable(raw); });
  }
}

bool OutputForwarder::all_closed() const {
  for (const auto& s : streams_)
    if (s->fd.valid()) return false;
  return true;
}

void OutputForwarder::close_all() {
  for (auto& s : streams_) {
    if (!s->fd.valid()) continue;
    emit(s.get(), /*flush=*/true);
    s->fd.reset();
  }
}

void OutputForwarder::on_readable(Stream* s) {
  if (!s->fd.valid()) return;
  char buf[16 * 1024];
  // One read per poll round keeps a chatty node from starving the others.
  ssize_t n = ::read(s->fd.get(), buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {  // EOF, or an error that will not go away
    emit(s, /*flush=*/true);
    s->fd.reset();
    return;
  }
  s->partial.append(buf, static_cast<size_t>(n));
  emit(s, /*flush=*/false);
}

void OutputForwarder::emit(Stream* s, bool flush) {
  std::string out;
  std::string prefix = tag_ ? fmt::format("[{}] ", s->rank) : std::string();
  size_t pos = 0;
  while (pos < s->partial.size()) {
    size_t nl = s->partial.find('\n', pos);
    size_t end;
    if (nl != std::string::npos) {
      end = nl + 1;
    } else if (s->partial.size() - pos >= kMaxLine || flush) {
      end = s->partial.size();
    } else {
      break;
    }
    out += prefix;
    out.append(s->partial, pos, end - pos);
    if (tag_ && out.back() != '\n') out += '\n';
    pos = end;
  }
  s->partial.erase(0, pos);
  if (!out.empty()) write_dest(s->dest, out);
}

void OutputForwarder::write_dest(int dest, const std::string& text) {
  if (dest_broken_[dest]) return;
  Status st = write_all(dest, text);
  if (!st) dest_broken_[dest] = true;  // EPIPE: nobody reads our output any more
}

}  // namespace loom::loomrun

// OutputForwarder: copies every node's stdout and stderr to loomrun's own, line by line.
//
// A line is written with one write(2), so lines of different nodes never mix mid-line. With
// tagging each line is prefixed "[rank] ". A line longer than kMaxLine is passed on in pieces
// (each tagged piece ends with a newline). A partial last line is flushed when its pipe closes
// (with a newline added only when tagging). If loomrun's stdout or stderr is closed (EPIPE), what
// would go there is dropped.
//
// Note: writes to loomrun's stdout block; a reader that stops reading stalls loomrun (as with
// mpirun). Nodes' stdio is a pipe, so their C stdio is fully buffered unless they flush.
//
// Thread safety: one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/bootstrap/unique_fd.h"
#include "poll_set.h"

namespace loom::loomrun {

class OutputForwarder {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;

  explicit OutputForwarder(bool tag) : tag_(tag) {}

  // Takes the read ends of a node's stdout and stderr pipes (non-blocking).
  void add(uint32_t rank, UniqueFd out, UniqueFd err);
  // Adds the pipes still open to `ps`.
  void add_to(PollSet* ps);
  bool all_closed() const;
  // Flushes partial lines and closes every pipe (at exit).
  void close_all();

 private:
  struct Stream {
    uint32_t rank;
    UniqueFd fd;
    int dest;  // STDOUT_FILENO or STDERR_FILENO
    std::string partial;
  };
  void on_readable(Stream* s);
  // Writes the complete lines at the front of s->partial (all of it if `flush`).
  void emit(Stream* s, bool flush);
  void write_dest(int dest, const std::string& text);

  const bool tag_;
  std::vector<std::unique_ptr<Stream>> streams_;
  bool dest_broken_[3] = {false, false, false};
};

}  // namespace loom::loomrun

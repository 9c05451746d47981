// StdinRelay: loomrun's stdin to the node that runs main (docs/launcher.md, "Standard input").
//
// Like mpirun, loomrun gives its stdin to one node (rank 0 unless --stdin says otherwise) and
// /dev/null to the others. A file or pipe is handed over as it is: the node reads the same open
// file (`prog < input` seeks, sizes and reads as it would alone). A terminal is not: the nodes
// run in their own process groups, and a read from the terminal there would stop the node
// (SIGTTIN). So for a terminal loomrun reads its stdin itself and copies it into a pipe that is
// the node's stdin, until end of file or until the node closes the pipe.
//
// Thread safety: one thread (loomrun's event loop).
#pragma once

#include <string>

#include "comm/bootstrap/unique_fd.h"
#include "loom/status.h"
#include "poll_set.h"

namespace loom::loomrun {

class StdinRelay {
 public:
  static constexpr size_t kMaxBuffered = 64 * 1024;

  // Prepares the descriptor that becomes the chosen node's stdin: loomrun's own stdin, or the
  // read end of a relay pipe when stdin is a terminal.
  static Result<StdinRelay> create();

  // The descriptor to give the node (valid until close_child_end()).
  int child_fd() const { return child_fd_; }
  // After the node has been forked: loomrun keeps no copy of the pipe's read end.
  void close_child_end() { child_end_.reset(); }
  // Adds what the relay waits for to `ps` (nothing once it is done, or without a relay).
  void add_to(PollSet* ps);

 private:
  void on_input();
  void on_output();
  void finish();

  int child_fd_ = -1;
  bool relaying_ = false;
  bool eof_ = false;
  UniqueFd child_end_;  // the pipe's read end, until the node is forked
  UniqueFd pipe_w_;     // non-blocking
  std::string buffered_;
};

}  // namespace loom::loomrun

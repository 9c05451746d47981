// StopSignals: what a node does when it is told to stop by a signal (loomrun's --timeout sends
// SIGTERM; a ^C or a signal loomrun caught is passed on to every node).
//
// Without it the default action ends the process at once: what the program wrote to a buffered
// stdout is lost (under loomrun stdout is a pipe) and LOOM_STATS_JSON is never written. With it
// the node flushes its output, prints and writes the counters it has, marked partial, and then
// ends by the same signal. A signal handler may do none of that (stdio and the counters take
// locks), so the handler only writes the signal's number into a pipe; a thread of Loom's own
// waits on the pipe and does the work. If that work blocks (a lock held by a thread stopped
// forever), the launcher's SIGKILL after its grace period still ends the node.
//
// Only signals whose disposition is the default when Loom starts are taken: a program that
// handles SIGTERM itself keeps its handler.
//
// Thread safety: install() once, from the thread that starts the runtime.
#pragma once

#include <functional>

namespace loom::runtime {

// `on_stop(sig)` runs on the watcher thread when SIGTERM, SIGINT or SIGHUP arrives; after it
// returns the process ends by that signal (default action).
void install_stop_signals(std::function<void(int sig)> on_stop);

}  // namespace loom::runtime

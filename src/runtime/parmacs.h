// The PARMACS layer's node side (include/loom/parmacs.h is its C API): remote thread creation,
// the service loop of nodes other than 0, and the end of a job. docs/parmacs.md.
//
// Messages (runtime range):
//   pm.create (node 0 -> node k): u64 function address, u64 thread index, vt of node 0,
//             record set (the notices node k may lack): node k starts a thread that acquires,
//             runs the function, releases, and answers with pm.done.
//   pm.done   (node k -> node 0): u64 thread index, record set (notices node 0 may lack).
//   pm.end    (node 0 -> node k): the job ends; node k stops once its threads have returned.
//   pm.exit   (node k -> node 0): a thread of node k called exit(status): node 0 stops the job.
//   pm.abort  (node 0 -> node k, request): stop now with this status (after the reply).
//
// Thread safety: the C API from any application thread; handlers on the server thread.
#pragma once

#include "comm/types.h"
#include "loom/status.h"
#include "memory/frames.h"

namespace loom::runtime {

class Runtime;

namespace pm_msg {
inline constexpr comm::MsgType kCreate = comm::msg_range::kRuntime + 0;
inline constexpr comm::MsgType kDone = comm::msg_range::kRuntime + 1;
inline constexpr comm::MsgType kEnd = comm::msg_range::kRuntime + 2;
inline constexpr comm::MsgType kExit = comm::msg_range::kRuntime + 3;
inline constexpr comm::MsgType kAbort = comm::msg_range::kRuntime + 4;
}  // namespace pm_msg

// Registers the pm.* message types (every node, before the start-up barrier).
Status register_parmacs_messages(Runtime& rt);

// Nodes other than 0: runs created threads until pm.end, then returns (the caller finalizes).
void parmacs_service_loop();
// Node 0: ends the job (every node stops; the program's data stays usable here). Idempotent.
void parmacs_end_job();
// Lets the I/O interposers of libloom_parmacs.so (parmacs_io.cc) recognize shared memory, or
// stop doing so (null) before Loom stops.
// note: an atomic inside, because UCX's own threads call read() too, also while Loom starts.
void parmacs_io_attach(const memory::PageFrames* frames);
const memory::PageFrames* parmacs_io_frames();
// Marks the calling thread as one of the program's (main, or a thread CREATE started).
void parmacs_mark_program_thread();
// exit(status) was called. Returns if the ordinary exit may go on (node 0's main with no created
// thread still running: the exit handler ends the job cleanly); otherwise stops the whole job
// with `status` and never returns.
void parmacs_exit(int status);

}  // namespace loom::runtime

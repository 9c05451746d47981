// The PARMACS layer's node side (include/loom/parmacs.h is its C API): remote thread creation,
// the service loop of nodes other than 0, and the end of a job. docs/parmacs.md.
//
// Messages (runtime range):
//   pm.create (node 0 -> node k): u64 function address, u64 thread index, vt of node 0,
//             record set (the notices node k may lack): node k starts a thread that acquires,
//             runs the function, releases, and answers with pm.done.
//   pm.done   (node k -> node 0): u64 thread index, record set (notices node 0 may lack).
//   pm.end    (node 0 -> node k): the job ends; node k stops once its threads have returned.
//
// Thread safety: the C API from any application thread; handlers on the server thread.
#pragma once

#include "comm/types.h"
#include "loom/status.h"

namespace loom::runtime {

class Runtime;

namespace pm_msg {
inline constexpr comm::MsgType kCreate = comm::msg_range::kRuntime + 0;
inline constexpr comm::MsgType kDone = comm::msg_range::kRuntime + 1;
inline constexpr comm::MsgType kEnd = comm::msg_range::kRuntime + 2;
}  // namespace pm_msg

// Registers the pm.* message types (every node, before the start-up barrier).
Status register_parmacs_messages(Runtime& rt);

// Nodes other than 0: runs created threads until pm.end, then returns (the caller finalizes).
void parmacs_service_loop();
// Node 0: ends the job (every node stops; the program's data stays usable here). Idempotent.
void parmacs_end_job();

}  // namespace loom::runtime

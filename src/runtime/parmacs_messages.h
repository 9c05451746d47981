// The PARMACS messages' handlers (the wire formats are in parmacs.h), apart from the runtime
// that acts on them: each handler checks who sent the message and decodes and validates its
// payload, then calls the node's action for it. The runtime (parmacs.cc) passes its real
// actions; the fuzz harness (tests/fuzz/handlers_fuzz.cc) registers the same handlers on a
// simulated node with actions that only record.
//
// Thread safety: the handlers run on the server thread, as every handler; the actions are
// called there and must not block.
#pragma once

#include <cstdint>
#include <functional>

#include "comm/comm.h"
#include "loom/status.h"
#include "protocols/consistency.h"

namespace loom::runtime {

// A pm.create, decoded: the thread to start on this node.
struct PmCreate {
  uint64_t fn = 0;
  uint64_t index = 0;
  protocols::VectorTime creator_vt;
};

// The node the handlers run on, and what each valid message makes it do.
struct PmNode {
  comm::Comm* comm = nullptr;
  protocols::Consistency* consistency = nullptr;  // stores the notices pm.create/pm.done bring
  std::function<void(PmCreate)> create;           // node k: start the thread
  std::function<void()> done;                     // node 0: a created thread has ended
  std::function<void()> end;                      // node k: the job ends
  std::function<void(uint32_t status)> exit;      // node 0: a thread of node k called exit()
  // node k: node 0 stops the job with `status`; the action answers the request.
  std::function<Status(uint32_t status, comm::ReplyTo reply)> abort;
};

// Registers pm.create, pm.done, pm.end, pm.exit and pm.abort (every node, before the start-up
// barrier). REQUIRES: every pointer and action of `node` set.
Status register_parmacs_handlers(const PmNode& node);

}  // namespace loom::runtime

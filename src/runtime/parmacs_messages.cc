#include "runtime/parmacs_messages.h"

#include <fmt/format.h>

#include <cstring>

#include "protocols/hlrc/notices.h"
#include "runtime/parmacs.h"

namespace loom::runtime {

namespace hl = protocols::hlrc;
using protocols::ByteReader;

Status register_parmacs_handlers(const PmNode& node) {
  comm::Comm& c = *node.comm;
  comm::MessageRegistry& reg = c.registry();
  // Who sends what (parmacs.md): node 0 creates, ends and aborts; every other node reports to it.
  // note: a CREATE names a function of the program by address (the same binary everywhere),
  // which no check here can validate: peers are trusted not to lie (docs/comm.md, the job tag).
  auto from_node0 = [&c](const comm::Incoming& in, const char* what) -> Status {
    if (in.src() != 0 || c.rank() == 0)
      return Status::malformed(fmt::format("{} from node {} to node {}: only node 0 sends it", what,
                                           in.src(), c.rank()));
    return Status::ok();
  };
  auto to_node0 = [&c](const comm::Incoming& in, const char* what) -> Status {
    if (c.rank() != 0)
      return Status::malformed(fmt::format("{} from node {} to node {}: only node 0 takes it", what,
                                           in.src(), c.rank()));
    return Status::ok();
  };
  auto status_of = [](const comm::Incoming& in, const char* what) -> Result<uint32_t> {
    uint32_t code;
    if (in.payload().size() != sizeof code)
      return Status::malformed(fmt::format("{}: bad length", what));
    std::memcpy(&code, in.payload().data(), sizeof code);
    return code;
  };
  Status s =
      reg.add(pm_msg::kCreate, "pm.create", [node, from_node0](comm::Incoming& in) -> Status {
        if (Status st = from_node0(in, "pm.create"); !st) return st;
        ByteReader rd(in.payload());
        PmCreate req;
        if (!rd.u64(&req.fn) || !rd.u64(&req.index))
          return Status::malformed("pm.create: truncated");
        Result<protocols::VectorTime> vt = hl::read_vt(rd, node.comm->size());
        if (!vt) return vt.status();
        req.creator_vt = std::move(*vt);
        if (Status st = node.consistency->store_notices(rd); !st) return st;
        if (rd.left() != 0)
          return Status::malformed(fmt::format("pm.create: {} trailing bytes", rd.left()));
        node.create(std::move(req));
        return Status::ok();
      });
  if (!s) return s;
  s = reg.add(pm_msg::kDone, "pm.done", [node, to_node0](comm::Incoming& in) -> Status {
    if (Status st = to_node0(in, "pm.done"); !st) return st;
    ByteReader rd(in.payload());
    uint64_t index;
    if (!rd.u64(&index)) return Status::malformed("pm.done: truncated");
    if (Status st = node.consistency->store_notices(rd); !st) return st;
    if (rd.left() != 0)
      return Status::malformed(fmt::format("pm.done: {} trailing bytes", rd.left()));
    node.done();
    return Status::ok();
  });
  if (!s) return s;
  s = reg.add(pm_msg::kEnd, "pm.end", [node, from_node0](comm::Incoming& in) -> Status {
    if (Status bad = from_node0(in, "pm.end"); !bad) return bad;
    node.end();
    return Status::ok();
  });
  if (!s) return s;
  s = reg.add(pm_msg::kExit, "pm.exit", [node, to_node0, status_of](comm::Incoming& in) -> Status {
    if (Status bad = to_node0(in, "pm.exit"); !bad) return bad;
    Result<uint32_t> code = status_of(in, "pm.exit");
    if (!code) return code.status();
    node.exit(*code);
    return Status::ok();
  });
  if (!s) return s;
  return reg.add(pm_msg::kAbort, "pm.abort", [node, from_node0, status_of](comm::Incoming& in) {
    if (Status bad = from_node0(in, "pm.abort"); !bad) return bad;
    Result<uint32_t> code = status_of(in, "pm.abort");
    if (!code) return code.status();
    return node.abort(*code, in.reply_to());
  });
}

}  // namespace loom::runtime

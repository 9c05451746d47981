// Fuzz target: every message type's payload decoder, reached through the real handler entry
// (Comm's dispatch of a message from a peer) of a node with state, and the decoders of the
// replies that handlers' state machines wait for.
//
// A two-node simulation (src/sim) first runs a short fixed program that leaves the nodes with
// state (pages of every protocol homed at node 0, copies and unreleased diffs at node 1, write
// notices and vector times, a lock handed over and another still held, barrier episodes passed,
// semaphores at both nodes, a condition signalled); then the input's messages are sent between
// the nodes (Simulation::post) and everything they cause is delivered (settle). The PARMACS
// handlers (runtime/parmacs_messages.h) are registered on both nodes, with actions that only
// count, and runtime.leaving (runtime/leaving_message.h), acted on by the barrier service. The
// program runs once per variant, in this process; each input runs in a child process forked from
// that state (fuzz.h, run_in_child), so an input costs its own messages only.
//
// Input: byte 0 picks the simulation's variant (bit 0: HLRC home migration after every diff;
// bits 1-2: the seed of the schedule; bit 3: the program runs again, in the fork, with the
// input's reply patches in place, so that they reach the replies application threads wait
// for; slower); then up to 16 messages, each
//   u8 type    an index into the registered message types (modulo their number, in id order)
//   u8 flags   bit 0: node 0 sends it to node 1 (else node 1 to node 0); bit 1: as a request;
//              bit 2: not sent, but the payload of the next reply of that type instead of the
//              one its sender made (the replies that the posted messages cause, or with
//              variant bit 3 the program's)
//   u16 length the payload's length (capped at what is left), then the payload.
// Oracle: no crash, abort, hang or sanitizer report; the simulation ends either cleanly (the
// messages were valid) or through a node's fatal path (a malformed message or reply, named with
// its sender), never with a simulator-level failure (a step limit: messages that never end).
#include <fmt/format.h>
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "comm/comm.h"
#include "fuzz.h"
#include "protocols/hlrc/notices.h"
#include "protocols/protocol.h"
#include "runtime/leaving_message.h"
#include "runtime/parmacs.h"
#include "runtime/parmacs_messages.h"
#include "sim/sim.h"

namespace loom::fuzz {
namespace {

namespace hl = protocols::hlrc;
using sim::kPage;
using sim::Simulation;
using sim::Thread;

constexpr size_t kMaxMessages = 16;

struct Variant {
  bool migrate = false;
  uint64_t seed = 1;
  bool during_program = false;  // the input's reply patches apply to the program's replies
};

Variant variant_of(uint8_t b) { return Variant{(b & 1) != 0, 1 + ((b >> 1) & 3u), (b & 8) != 0}; }

template <typename Id>
uint64_t managed_by(Id id, uint32_t node) {
  for (uint32_t k = 0;; ++k)
    if (sync::manager_of(id(k), 2) == node) return id(k);
}

// What the program's threads share.
struct Shared {
  std::vector<uint64_t> pages;  // two pages per protocol, homed at node 0
  sync::ObjectRef sem0, sem1;   // semaphores at node 0 and node 1
};

std::unique_ptr<Simulation> make_simulation(const Variant& v, sim::Options o = {}) {
  o.nodes = 2;
  o.seed = v.seed;
  o.hlrc.migrate_after = v.migrate ? 1 : 0;
  o.trace_tail =
      std::getenv("LOOM_FUZZ_VERBOSE") != nullptr ? 80 : 8;  // events printed on a failure
  // note: the program takes about 1,000 steps; messages that keep causing messages for 20,000
  // more never end.
  o.max_steps = 20'000;
  auto sim = std::make_unique<Simulation>(o);
  for (uint32_t n = 0; n < 2; ++n) {
    runtime::PmNode pm;
    pm.comm = &sim->comm(n);
    pm.consistency = &sim->hlrc(n);
    pm.create = [](runtime::PmCreate) {};
    pm.done = [] {};
    pm.end = [] {};
    pm.exit = [](uint32_t) {};
    comm::Comm* c = pm.comm;
    pm.abort = [c](uint32_t, comm::ReplyTo reply) {
      return c->reply(reply, std::span<const std::byte>());
    };
    if (Status s = runtime::register_parmacs_handlers(pm); !s) fail(s.to_string());
    // runtime.leaving, acted on as the runtime does: the barrier service learns the leaver's
    // episodes, and a barrier stranded by them stops the job.
    sync::BarrierService& bars = sim->barriers(n);
    bars.set_stranded_handler([c](comm::NodeId left, uint64_t id, uint64_t episode) {
      c->report_fatal(
          Status::peer_failed(fmt::format("node {} left while barrier {:#x} waits (episode {})",
                                          left, id, episode)),
          left);
    });
    Status s = runtime::register_leaving_handler(*c, bars);
    if (!s) fail(s.to_string());
  }

  auto sh = std::make_shared<Shared>();
  const uint64_t barrier = managed_by(sim::barrier_id, 0);
  const uint64_t l0 = managed_by(sim::lock_id, 0), l1 = managed_by(sim::lock_id, 1);
  const uint64_t l2 = sim::lock_id(1000);
  sim->spawn(0, [sh, barrier, l0, l1](Thread& t) {
    const int64_t one = 1;
    const auto one_bytes = std::as_bytes(std::span(&one, 1));
    const std::vector<std::string> names = protocols::protocol_names();
    for (size_t p = 0; p < names.size(); ++p) {
      uint64_t a = t.alloc(2 * kPage, memory::Placement::kNode, 0, names[p].c_str());
      t.write(a, p + 1);
      t.write(a + kPage, 7);
      sh->pages.push_back(a);
    }
    sh->sem0 = t.create_object(sync::kSemaphoreClass, 0);
    sh->sem1 = t.create_object(sync::kSemaphoreClass, 1);
    t.barrier(barrier, 2);
    t.lock(l0);
    t.write(sh->pages[0] + 16, 1);
    t.unlock(l0);
    (void)t.call_object(sh->sem0, sync::kSemaphoreV, one_bytes);
    uint64_t generation = 0;
    t.lock(l1);
    t.cond_signal(sim::cond_id(0), &generation, /*all=*/true);
    t.unlock(l1);
    t.barrier(barrier, 2);
  });
  sim->spawn(1, [sh, barrier, l0, l2](Thread& t) {
    const int64_t one = 1;
    const auto one_bytes = std::as_bytes(std::span(&one, 1));
    t.barrier(barrier, 2);
    for (uint64_t a : sh->pages) {
      (void)t.read(a);
      t.write(a + 8, 2);
    }
    t.lock(l0);
    t.write(sh->pages[0] + 24, 2);
    t.unlock(l0);
    (void)t.call_object(sh->sem1, sync::kSemaphoreV, one_bytes);
    (void)t.call_object(sh->sem0, sync::kSemaphoreP, one_bytes);
    t.barrier(barrier, 2);
    t.lock(l2);  // held when the program ends, with a write not yet released
    t.write(sh->pages[0] + 32, 3);
  });
  return sim;
}

// The message types with a handler, in id order (the same on both nodes).
std::vector<comm::MsgType> handled_types(Simulation& sim) {
  std::vector<comm::MsgType> out;
  for (comm::MsgType t = 0; t < comm::kMaxMsgTypes; ++t)
    if (const comm::MsgTypeInfo* info = sim.comm(0).registry().find(t);
        info != nullptr && info->handler)
      out.push_back(t);
  return out;
}

void run_program(Simulation& sim) {
  if (Status s = sim.run(); !s) fail("the fuzz harness's program failed: " + s.to_string());
}

struct Message {
  comm::MsgType type;
  uint32_t src;
  bool request;
  std::string payload;
  bool reply = false;  // a reply patch (flags bit 2), not a message to post
};

std::string encode_input(uint8_t variant, const std::vector<std::pair<uint8_t, Message>>& msgs) {
  std::string out(1, static_cast<char>(variant));
  for (const auto& [index, m] : msgs) {
    out += static_cast<char>(index);
    out += static_cast<char>((m.src == 0 ? 1 : 0) | (m.request ? 2 : 0) | (m.reply ? 4 : 0));
    uint16_t len = static_cast<uint16_t>(m.payload.size());
    out.append(reinterpret_cast<const char*>(&len), 2);
    out += m.payload;
  }
  return out;
}

// The reply payloads an input puts in place of the ones their senders make, in input order;
// set in the child process only (the program's replies are untouched).
struct ReplyPatch {
  comm::MsgType type;
  std::string payload;
  bool used = false;
};
std::vector<ReplyPatch> reply_patches;

void patch_reply(const comm::WireHeader& h, comm::NodeId, comm::Buffer* payload) {
  if (!h.is_reply()) return;
  for (ReplyPatch& p : reply_patches)
    if (!p.used && p.type == h.type) {
      p.used = true;
      *payload =
          comm::Buffer::copy_of(std::as_bytes(std::span(p.payload.data(), p.payload.size())));
      return;
    }
}

// Whether a failed simulation ended in a node's fatal path, which names the node ("simulation
// seed 3 failed at step 140: node 1: bad 'lock.request' message from node 0: ..."), and not in
// the simulator's own verdict (a step limit).
bool ended_in_a_node(std::string_view m) {
  constexpr std::string_view kSeed = "simulation seed ", kStep = " failed at step ";
  auto digits = [&m](size_t pos) {
    size_t end = pos;
    while (end < m.size() && m[end] >= '0' && m[end] <= '9') ++end;
    return end > pos ? end : std::string_view::npos;
  };
  if (!m.starts_with(kSeed)) return false;
  size_t pos = digits(kSeed.size());
  if (pos == std::string_view::npos || m.substr(pos, kStep.size()) != kStep) return false;
  pos = digits(pos + kStep.size());
  if (pos == std::string_view::npos) return false;
  m.remove_prefix(pos);
  return m.starts_with(": node 0: ") || m.starts_with(": node 1: ");
}

// The messages of an input (after the variant byte), reply patches included.
std::vector<Message> parse_input(const std::vector<comm::MsgType>& types, const uint8_t* data,
                                 size_t size) {
  std::vector<Message> out;
  size_t pos = 1;
  for (size_t k = 0; k < kMaxMessages && size - pos >= 4; ++k) {
    const comm::MsgType type = types[data[pos] % types.size()];
    const uint8_t flags = data[pos + 1];
    uint16_t len;
    std::memcpy(&len, data + pos + 2, 2);
    pos += 4;
    len = static_cast<uint16_t>(std::min<size_t>(len, size - pos));
    out.push_back(Message{type, (flags & 1) != 0 ? 0u : 1u, (flags & 2) != 0,
                          std::string(reinterpret_cast<const char*>(data + pos), len),
                          (flags & 4) != 0});
    pos += len;
  }
  return out;
}

void post_all(Simulation& sim, const std::vector<Message>& msgs) {
  for (const Message& m : msgs)
    if (!m.reply)
      sim.post(m.src, 1 - m.src, m.type,
               std::as_bytes(std::span(m.payload.data(), m.payload.size())), m.request);
}

// The input's messages, on a copy of the state the program left (a fork of the fork server).
// With Variant::during_program, the program runs again, in this process, with the patches in
// place: replies that application threads wait for (pages, grants, barrier arrivals, home
// answers) and the state machines' ones.
void run_input(Simulation& sim, const std::vector<comm::MsgType>& types, const uint8_t* data,
               size_t size) {
  const std::vector<Message> msgs = parse_input(types, data, size);
  const bool verbose = std::getenv("LOOM_FUZZ_VERBOSE") != nullptr;
  for (const Message& m : msgs) {
    if (verbose)
      std::fprintf(stderr, "%s %s%s, %zu bytes\n", m.reply ? "reply patch" : "message",
                   sim.comm(0).registry().name_of(m.type).c_str(),
                   m.reply     ? ""
                   : m.request ? fmt::format(" request {} -> {}", m.src, 1 - m.src).c_str()
                               : fmt::format(" {} -> {}", m.src, 1 - m.src).c_str(),
                   m.payload.size());
    if (m.reply) reply_patches.push_back(ReplyPatch{m.type, m.payload});
  }
  std::unique_ptr<Simulation> fresh;
  Simulation* on = &sim;
  if (variant_of(data[0]).during_program) {
    sim::Options o;
    o.tamper = patch_reply;
    fresh = make_simulation(variant_of(data[0]), o);
    on = fresh.get();
    if (Status s = on->run(); !s) {
      if (verbose) std::fprintf(stderr, "%s\n", s.to_string().substr(0, 300).c_str());
      if (!ended_in_a_node(s.message()))
        fail("the program with patched replies did not end in a node's fatal path: " +
             s.to_string());
      return;
    }
  }
  post_all(*on, msgs);
  Status s = on->settle();
  if (verbose) std::fprintf(stderr, "%s\n", s.to_string().substr(0, 300).c_str());
  if (!s && !ended_in_a_node(s.message()))
    fail("the messages did not end in a node's fatal path: " + s.to_string());
}

// The state the program leaves, per variant, made the first time an input asks for it.
struct Template {
  std::unique_ptr<Simulation> sim;
  std::vector<comm::MsgType> types;
};
Template& template_for(uint8_t variant) {
  // note: never destroyed: the simulations outlive the function-local statics their nodes use.
  static auto* const templates = new std::array<Template, 8>;
  Template& t = (*templates)[variant & 7];  // during_program inputs take the types from it
  if (t.sim == nullptr) {
    sim::Options o;
    o.tamper = patch_reply;
    t.sim = make_simulation(variant_of(variant), o);
    t.types = handled_types(*t.sim);
    run_program(*t.sim);
  }
  return t;
}

}  // namespace

std::vector<std::string> seeds() {
  std::vector<std::string> out;
  for (uint8_t variant : {0, 1}) {
    // The messages the program sends, as the nodes make them (replies cannot be posted).
    std::vector<Message> seen;
    sim::Options o;
    std::map<comm::MsgType, std::string> program_replies;
    o.tamper = [&seen, &program_replies](const comm::WireHeader& h, comm::NodeId,
                                         comm::Buffer* payload) {
      if (h.is_reply()) {
        program_replies.emplace(
            h.type, std::string(reinterpret_cast<const char*>(payload->data()), payload->size()));
        return;
      }
      seen.push_back(
          Message{h.type, h.src, h.request_id != 0,
                  std::string(reinterpret_cast<const char*>(payload->data()), payload->size())});
    };
    std::unique_ptr<Simulation> sim = make_simulation(variant_of(variant), o);
    const std::vector<comm::MsgType> types = handled_types(*sim);
    run_program(*sim);
    auto index_of = [&types](comm::MsgType t) {
      return static_cast<uint8_t>(std::find(types.begin(), types.end(), t) - types.begin());
    };
    // PARMACS: a create and a done carrying the notices a node at time zero lacks.
    for (uint32_t src : {0u, 1u}) {
      std::vector<std::byte> p;
      hl::ByteWriter w(&p);
      if (src == 0) {
        w.u64(0x401000);
        w.u64(1);
        hl::write_vt(w, sim->hlrc(0).vector_time());
      } else {
        w.u64(1);
      }
      sim->hlrc(src).write_notices_for(protocols::VectorTime(2, 0), w);
      seen.push_back(Message{src == 0 ? runtime::pm_msg::kCreate : runtime::pm_msg::kDone, src,
                             false,
                             std::string(reinterpret_cast<const char*>(p.data()), p.size())});
    }
    seen.push_back(Message{runtime::pm_msg::kExit, 1, false, std::string("\3\0\0\0", 4)});
    seen.push_back(Message{runtime::pm_msg::kAbort, 0, true, std::string("\3\0\0\0", 4)});
    seen.push_back(Message{runtime::pm_msg::kEnd, 0, false, ""});
    // runtime.leaving: each node leaves, with the barrier episodes it completed.
    for (uint32_t src : {0u, 1u}) {
      std::vector<std::byte> p =
          runtime::encode_leaving({"called loom::finalize", sim->barriers(src).episodes()});
      seen.push_back(Message{runtime::kLeavingMsg, src, false,
                             std::string(reinterpret_cast<const char*>(p.data()), p.size())});
    }
    const size_t first = out.size();
    out.push_back(encode_input(variant, {}));
    // Up to two of each type and direction, each alone and the first two in one input.
    std::map<std::pair<comm::MsgType, uint32_t>, std::vector<const Message*>> by_kind;
    for (const Message& m : seen) {
      auto& v = by_kind[{m.type, m.src}];
      if (v.size() < 2 && index_of(m.type) < types.size()) v.push_back(&m);
    }
    for (const auto& [kind, v] : by_kind) {
      for (const Message* m : v) out.push_back(encode_input(variant, {{index_of(m->type), *m}}));
      if (v.size() == 2)
        out.push_back(
            encode_input(variant, {{index_of(v[0]->type), *v[0]}, {index_of(v[1]->type), *v[1]}}));
    }
    // The program's replies, each type once, with a real reply in place of the first one of
    // its type (Variant::during_program).
    for (const auto& [type, payload] : program_replies)
      if (index_of(type) < types.size())
        out.push_back(
            encode_input(variant | 8, {{index_of(type), Message{type, 0, false, payload, true}}}));
    // The replies the inputs so far cause (the handlers' own requests, answered), each type
    // once, with the first input that causes it and a real reply of its type in place of the
    // one its sender makes.
    const size_t made = out.size();
    std::set<comm::MsgType> patched;
    for (size_t k = first; k < made; ++k) {
      std::vector<Message> caused;
      sim::Options so;
      bool settling = false;
      so.tamper = [&caused, &settling](const comm::WireHeader& h, comm::NodeId,
                                       comm::Buffer* payload) {
        if (settling && h.is_reply())
          caused.push_back(Message{
              h.type, h.src, false,
              std::string(reinterpret_cast<const char*>(payload->data()), payload->size()), true});
      };
      std::unique_ptr<Simulation> again = make_simulation(variant_of(variant), so);
      run_program(*again);
      const auto* bytes = reinterpret_cast<const uint8_t*>(out[k].data());
      std::vector<Message> msgs = parse_input(types, bytes, out[k].size());
      post_all(*again, msgs);
      settling = true;
      (void)again->settle();
      for (const Message& r : caused) {
        if (!patched.insert(r.type).second || index_of(r.type) >= types.size()) continue;
        std::vector<std::pair<uint8_t, Message>> with;
        for (const Message& m : msgs) with.emplace_back(index_of(m.type), m);
        with.emplace_back(index_of(r.type), r);
        out.push_back(encode_input(variant, with));
      }
    }
  }
  return out;
}

}  // namespace loom::fuzz

namespace loom::fuzz {
namespace {
// The fork server builds a variant's state once (prepare); each input runs in a fork of it.
constexpr ForkedTarget kTarget{[](const uint8_t* d, size_t) { (void)template_for(d[0]); },
                               [](const uint8_t* d, size_t n) {
                                 Template& t = template_for(d[0]);
                                 run_input(*t.sim, t.types, d, n);
                               }};
}  // namespace
}  // namespace loom::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  loom::fuzz::start_fork_server(loom::fuzz::kTarget);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  loom::fuzz::run_forked(loom::fuzz::kTarget, data, size);
  return 0;
}

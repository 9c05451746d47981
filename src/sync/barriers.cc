#include "sync/barriers.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/log.h"

namespace loom::sync {

using protocols::ByteReader;
using protocols::ByteWriter;
using protocols::VectorTime;
namespace hl = protocols::hlrc;

// Arrival (a request):  u64 id, u32 count, u32 flags, u64 episode, vt, vt validated, record set
// Release (its reply):  u64 id, u64 episode, vt (release), u32 has_floor, [vt floor], u32 flags,
//                       vt all_validated, record set; or empty (another arrival of the node
//                       gets the release)
// flags bit 0: arrival: this node wants a collection; release: every node collects.
namespace {
constexpr uint32_t kFlagCollect = 1;

// The node's validated vector time, as sent: zeros when it never validated.
VectorTime validated_or_zero(const protocols::Consistency& c, uint32_t nodes) {
  VectorTime v = c.validated();
  if (v.size() != nodes) v.assign(nodes, 0);
  return v;
}
}  // namespace

BarrierService::BarrierService(comm::Comm& comm, protocols::Consistency& consistency,
                               uint64_t num_pages)
    : comm_(comm),
      consistency_(consistency),
      me_(comm.rank()),
      nodes_(comm.size()),
      num_pages_(num_pages) {}

BarrierService::~BarrierService() = default;

Status BarrierService::register_messages() {
  comm::MessageRegistry& reg = comm_.registry();
  auto print = [](std::span<const std::byte> p) {
    uint64_t id = 0;
    if (p.size() >= 8) std::memcpy(&id, p.data(), 8);
    return fmt::format("barrier={:#x} bytes={}", id, p.size());
  };
  return reg.add(
      msg::kBarrierArrive, "barrier.arrive",
      [this](comm::Incoming& in) {
        if (!in.reply_to().valid()) return Status::malformed("barrier arrival: not a request");
        return on_arrive(in.src(), in.reply_to(), in.payload());
      },
      print);
}

void BarrierService::wait(uint64_t id, uint32_t count) {
  consistency_.release(protocols::ReleaseKind::kBarrier);
  Waiter w;
  std::vector<std::byte> payload;
  {
    MutexLock l(mu_);
    NodeBarrier& nb = bars_[id];
    if (nb.base.empty()) nb.base.assign(nodes_, 0);
    nb.waiters.push_back(&w);
    ByteWriter bw(&payload);
    bw.u64(id);
    bw.u32(count);
    bw.u32(consistency_.wants_collection() ? kFlagCollect : 0);
    bw.u64(nb.episode);
    hl::write_vt(bw, consistency_.vector_time());
    hl::write_vt(bw, validated_or_zero(consistency_, nodes_));
    consistency_.write_notices_for(nb.base, bw);
  }
  counters_.waits.fetch_add(1, std::memory_order_relaxed);
  int64_t t0 = comm::now_ns();
  comm::NodeId mgr = manager_of(id, nodes_);
  if (mgr == me_) {
    Status s = on_arrive(me_, comm::ReplyTo{}, payload);
    LOOM_CHECK(s.is_ok(), "barrier {:#x}: {}", id, s.to_string());
  } else {
    comm::Comm::Request req;
    Status s = comm_.start_request(mgr, msg::kBarrierArrive, payload, &req);
    LOOM_CHECK(s.is_ok(), "barrier {:#x}: sending the arrival to node {}: {}", id, mgr,
               s.to_string());
    const Status& r = comm_.wait(req.done);
    LOOM_CHECK(r.is_ok(), "barrier {:#x}: waiting for node {}: {}", id, mgr, r.to_string());
    // The release, or nothing if another arrival of this node got it (it wakes us).
    if (req.reply.size() != 0) {
      Status rs = on_release(req.reply.span());
      LOOM_CHECK(rs.is_ok(), "barrier {:#x}: release from node {}: {}", id, mgr, rs.to_string());
    }
  }
  const Status& s = comm_.wait(w.done);
  LOOM_CHECK(s.is_ok(), "barrier {:#x}: {}", id, s.to_string());
  counters_.wait_ns.fetch_add(comm::now_ns() - t0, std::memory_order_relaxed);
  consistency_.acquire();
  if (w.collect) {
    consistency_.collect();
    counters_.collections.fetch_add(1, std::memory_order_relaxed);
  }
}

Status BarrierService::on_arrive(comm::NodeId src, const comm::ReplyTo& reply,
                                 std::span<const std::byte> payload) {
  ByteReader r(payload);
  uint64_t id, episode;
  uint32_t count, flags;
  if (!r.u64(&id) || !has_tag(id, kBarrierTag) || !r.u32(&count) || !r.u32(&flags) ||
      !r.u64(&episode) || (flags & ~kFlagCollect) != 0)
    return Status::malformed("barrier arrival: bad header");
  if (manager_of(id, nodes_) != me_)
    return Status::malformed("barrier arrival sent to a non-manager");
  Result<VectorTime> vt = hl::read_vt(r, nodes_);
  if (!vt) return vt.status();
  Result<VectorTime> validated = hl::read_vt(r, nodes_);
  if (!validated) return validated.status();
  Result<std::vector<hl::Record>> recs = hl::read_records(r, nodes_, num_pages_);
  if (!recs) return recs.status();

  std::vector<std::byte> release;
  std::vector<comm::ReplyTo> replies;
  bool local = false;  // this node has waiters to release
  {
    MutexLock l(mgr_mu_);
    Managed& m = managed_[id];
    if (m.arrived == 0) {
      m.count = count;
      m.from.assign(nodes_, false);
      m.max_vt.assign(nodes_, 0);
      m.collect = false;
      m.min_validated = *validated;
    }
    if (count != m.count)
      log::die(3, fmt::format("barrier {:#x}: node {} waits for {} arrivals, others for {}; every "
                              "use of a barrier must give the same count",
                              id, src, count, m.count));
    LOOM_CHECK(episode == m.episode, "barrier {:#x}: node {} arrived for episode {} during {}", id,
               src, episode, m.episode);
    ++m.arrived;
    m.from[src] = true;
    for (uint32_t w = 0; w < nodes_; ++w) {
      m.max_vt[w] = std::max(m.max_vt[w], (*vt)[w]);
      m.min_validated[w] = std::min(m.min_validated[w], (*validated)[w]);
    }
    m.collect = m.collect || (flags & kFlagCollect) != 0;
    if (reply.valid()) m.replies.push_back(reply);
    for (hl::Record& rec : *recs) {
      auto key = std::make_pair(rec.writer, rec.interval);
      m.records.try_emplace(key, std::move(rec));
    }
    if (m.arrived < m.count) return Status::ok();

    const auto arrived_nodes =
        static_cast<uint32_t>(std::count(m.from.begin(), m.from.end(), true));
    if (arrived_nodes != nodes_)
      log::die(3, fmt::format("barrier {:#x}: an episode of {} arrivals completed with threads of "
                              "only {} of the {} nodes; Loom barriers need at least one thread of "
                              "every node in each episode",
                              id, m.count, arrived_nodes, nodes_));
    local = m.from[me_];
    replies.swap(m.replies);
    ByteWriter w(&release);
    w.u64(id);
    w.u64(m.episode);
    hl::write_vt(w, m.max_vt);
    w.u32(m.has_prev ? 1 : 0);
    if (m.has_prev) hl::write_vt(w, m.prev_vt);
    w.u32(m.collect ? kFlagCollect : 0);
    hl::write_vt(w, m.min_validated);
    std::vector<const hl::Record*> all;
    all.reserve(m.records.size());
    for (const auto& [k, rec] : m.records) all.push_back(&rec);
    hl::write_records(w, all);
    m.prev_vt = m.max_vt;
    m.has_prev = true;
    m.records.clear();
    m.arrived = 0;
    ++m.episode;
    counters_.episodes_managed.fetch_add(1, std::memory_order_relaxed);
  }
  // note: replies first; the local waiters' release (notices, garbage collection) can wait.
  std::vector<bool> answered(nodes_, false);
  for (const comm::ReplyTo& to : replies) {
    const bool first = !answered[to.node];
    answered[to.node] = true;
    Status s = first ? comm_.reply(to, release) : comm_.reply(to, std::span<const std::byte>());
    LOOM_CHECK(s.is_ok(), "barrier {:#x}: sending the release to node {}: {}", id, to.node,
               s.to_string());
  }
  if (local) {
    Status s = on_release(release);
    LOOM_CHECK(s.is_ok(), "barrier {:#x}: {}", id, s.to_string());
  }
  return Status::ok();
}

Status BarrierService::on_release(std::span<const std::byte> payload) {
  ByteReader r(payload);
  uint64_t id, episode;
  uint32_t has_floor;
  if (!r.u64(&id) || !has_tag(id, kBarrierTag) || !r.u64(&episode))
    return Status::malformed("barrier release: bad header");
  Result<VectorTime> vt = hl::read_vt(r, nodes_);
  if (!vt) return vt.status();
  if (!r.u32(&has_floor)) return Status::malformed("barrier release: truncated");
  VectorTime floor;
  if (has_floor) {
    Result<VectorTime> f = hl::read_vt(r, nodes_);
    if (!f) return f.status();
    floor = std::move(*f);
  }
  uint32_t flags;
  if (!r.u32(&flags) || (flags & ~kFlagCollect) != 0)
    return Status::malformed("barrier release: bad flags");
  Result<VectorTime> all_validated = hl::read_vt(r, nodes_);
  if (!all_validated) return all_validated.status();
  // Store the notices before any waiter runs.
  if (Status s = consistency_.store_notices(r); !s) return s;
  if (r.left() != 0) return Status::malformed("barrier release: trailing bytes");
  std::vector<Waiter*> wake;
  {
    MutexLock l(mu_);
    NodeBarrier& nb = bars_[id];
    if (episode != nb.episode)
      return Status::malformed(
          fmt::format("barrier {:#x}: release of episode {} during {}", id, episode, nb.episode));
    ++nb.episode;
    nb.base = std::move(*vt);
    wake.swap(nb.waiters);
  }
  // Every node holds the notices up to the previous episode's release: drop them.
  if (has_floor) consistency_.gc(floor);
  // Every node has validated its copies up to all_validated: what lies below is not needed.
  consistency_.drop_validated(*all_validated);
  if ((flags & kFlagCollect) != 0 && !wake.empty()) wake.front()->collect = true;
  for (Waiter* w : wake) w->done.complete(Status::ok());
  return Status::ok();
}

}  // namespace loom::sync

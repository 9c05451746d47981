#include "sync/barriers.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/log.h"

namespace loom::sync {

using protocols::ByteReader;
using protocols::ByteWriter;
using protocols::VectorTime;
namespace hl = protocols::hlrc;

// Arrival: u64 answer_to, u64 id, u32 count, u32 flags, u64 episode, vt, vt validated, record
//          set, mail (u32 n, then n x {u32 to, u32 len, len bytes}). A request (answer_to = 0:
//          the release answers the request), or the reply to a solicitation (answer_to: the id
//          the release answers).
// Release (a reply): u64 id, u64 episode, vt (release), u32 has_floor, [vt floor], u32 flags,
//          vt all_validated, record set, then for the node it goes to: mail (u32 n, then
//          n x {u32 from, u32 len, len bytes}), u64 solicitation (the id the node's next arrival
//          answers; 0: none). Or empty: another arrival of the node gets the release.
// flags bit 0: arrival: this node wants a collection; release: every node collects.
namespace {
constexpr uint32_t kFlagCollect = 1;
using Mail = std::vector<protocols::Consistency::MailItem>;

void write_mail(ByteWriter& w, const Mail& items) {
  w.u32(static_cast<uint32_t>(items.size()));
  for (const auto& m : items) {
    w.u32(m.node);
    w.u32(static_cast<uint32_t>(m.blob.size()));
    w.bytes(m.blob);
  }
}

// Reads a mail section; every node id must be below `nodes` and differ from `self`.
Result<Mail> read_mail(ByteReader& r, uint32_t nodes, uint32_t self) {
  uint32_t n;
  if (!r.u32(&n) || n > r.left() / 8) return Status::malformed("barrier mail: bad count");
  Mail items(n);
  for (auto& m : items) {
    uint32_t len;
    std::span<const std::byte> blob;
    if (!r.u32(&m.node) || !r.u32(&len) || !r.bytes(len, &blob))
      return Status::malformed("barrier mail: truncated");
    if (m.node >= nodes || m.node == self)
      return Status::malformed(fmt::format("barrier mail names node {}", m.node));
    m.blob.assign(blob.begin(), blob.end());
  }
  return items;
}

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

BarrierService::~BarrierService() {
  MutexLock l(mgr_mu_);
  for (auto& [id, m] : managed_)
    for (auto& s : m.solicited)
      if (s != nullptr && !s->taken) comm_.cancel(s->id);
}

Status BarrierService::register_messages() {
  comm::MessageRegistry& reg = comm_.registry();
  auto print = [](std::span<const std::byte> p) {
    uint64_t id = 0;
    if (p.size() >= 16) std::memcpy(&id, p.data() + 8, 8);
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
  Mail mail;
  consistency_.write_barrier_mail(&mail);
  Waiter w;
  std::vector<std::byte> payload;
  uint64_t episode;
  comm::ReplyTo solicited;
  std::optional<Stranded> stranded;
  {
    MutexLock l(mu_);
    NodeBarrier& nb = bars_[id];
    if (nb.base.empty()) nb.base.assign(nodes_, 0);
    nb.waiters.push_back(&w);
    stranded = stranded_locked(id, nb.episode);
    episode = nb.episode;
    solicited = nb.solicited;  // the node's first arrival answers the solicitation
    nb.solicited = {};
    ByteWriter bw(&payload);
    bw.u64(0);  // answer_to, set below
    bw.u64(id);
    bw.u32(count);
    bw.u32(consistency_.wants_collection() ? kFlagCollect : 0);
    bw.u64(nb.episode);
    hl::write_vt(bw, consistency_.vector_time());
    hl::write_vt(bw, validated_or_zero(consistency_, nodes_));
    consistency_.write_notices_for(nb.base, bw);
    write_mail(bw, mail);
  }
  if (stranded) report_stranded({*stranded});
  counters_.waits.fetch_add(1, std::memory_order_relaxed);
  int64_t t0 = comm::now_ns();
  comm::NodeId mgr = manager_of(id, nodes_);
  if (mgr == me_) {
    // note: this node's own arrival, checked against what the others' arrivals set (their count
    // and episode): a mismatch stops the job from here, naming both sides.
    if (Status s = on_arrive(me_, comm::ReplyTo{}, payload); !s) comm_.fail_job(s);
    serve_solicited(id, episode);
  } else {
    comm::Comm::Request req;
    Status s;
    if (solicited.valid()) {
      // The arrival answers the manager's solicitation; the release answers this request.
      uint64_t answer_to = comm_.expect_reply(mgr, &req);
      std::memcpy(payload.data(), &answer_to, sizeof answer_to);
      s = comm_.reply(solicited, payload);
      counters_.solicited_arrivals.fetch_add(1, std::memory_order_relaxed);
    } else {
      s = comm_.start_request(mgr, msg::kBarrierArrive, payload, &req);
    }
    LOOM_CHECK(s.is_ok(), "barrier {:#x}: sending the arrival to node {}: {}", id, mgr,
               s.to_string());
    const Status& r = comm_.wait(req.done);
    if (!r)
      comm_.fail_job(Status(r.code(), fmt::format("barrier {:#x}: waiting for node {}: {}", id, mgr,
                                                  r.message())),
                     mgr);
    // The release, or nothing if another arrival of this node got it (it wakes us).
    if (req.reply.size() != 0) {
      Status rs = on_release(mgr, id, req.reply.span());
      if (!rs)
        comm_.fail_bad_reply(
            mgr, msg::kBarrierArrive,
            Status(rs.code(), fmt::format("barrier {:#x}: release: {}", id, rs.message())));
    } else if (alone_at(id, episode, &w)) {
      // note: the manager answers once every arrival is in, and each thread of this node joins
      // the waiters before it sends its own: another arrival of this episode would be there.
      comm_.fail_bad_reply(
          mgr, msg::kBarrierArrive,
          Status::malformed(fmt::format(
              "barrier {:#x}: an empty answer (another arrival of this node gets the release), "
              "but this node has no other arrival at episode {}",
              id, episode)));
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

bool BarrierService::alone_at(uint64_t id, uint64_t episode, const Waiter* w) {
  MutexLock l(mu_);
  const NodeBarrier& nb = bars_[id];
  return nb.episode == episode && nb.waiters.size() == 1 && nb.waiters.front() == w;
}

void BarrierService::set_stranded_handler(
    std::function<void(comm::NodeId, uint64_t, uint64_t)> stranded) {
  stranded_ = std::move(stranded);
}

std::optional<BarrierService::Stranded> BarrierService::stranded_locked(uint64_t id,
                                                                        uint64_t episode) const {
  for (const auto& [node, done] : left_) {
    auto it = done.find(id);
    uint64_t completed = it == done.end() ? 0 : it->second;
    // note: a node that completed `episode` got its release, so this node's release is on its
    // way; one that did not can no longer arrive.
    if (completed <= episode) return Stranded{node, id, episode};
  }
  return std::nullopt;
}

void BarrierService::report_stranded(const std::vector<Stranded>& found) {
  if (!stranded_) return;
  for (const Stranded& s : found) stranded_(s.left, s.id, s.episode);
}

void BarrierService::peer_left(comm::NodeId left,
                               const std::vector<std::pair<uint64_t, uint64_t>>& episodes) {
  std::vector<Stranded> found;
  {
    MutexLock l(mu_);
    auto& done = left_[left];
    for (const auto& [id, n] : episodes) done[id] = n;
    for (const auto& [id, nb] : bars_) {
      if (nb.waiters.empty()) continue;
      auto it = done.find(id);
      if ((it == done.end() ? 0 : it->second) <= nb.episode)
        found.push_back(Stranded{left, id, nb.episode});
    }
  }
  report_stranded(found);
}

std::vector<std::pair<uint64_t, uint64_t>> BarrierService::episodes() const {
  MutexLock l(mu_);
  std::vector<std::pair<uint64_t, uint64_t>> out;
  out.reserve(bars_.size());
  for (const auto& [id, nb] : bars_) out.emplace_back(id, nb.episode);
  return out;
}

void BarrierService::serve_solicited(uint64_t id, uint64_t episode) {
  for (;;) {
    Solicited* outstanding = nullptr;
    comm::NodeId from = 0;
    comm::Buffer arrival;
    bool took = false;  // `arrival` is a solicited arrival (an empty one is malformed)
    Status failed;
    {
      MutexLock l(mgr_mu_);
      Managed& m = managed_[id];
      // The episode ended (its last arrival released it), or another thread of this node
      // serves it.
      if (m.episode != episode || m.serving) return;
      for (comm::NodeId n = 0; n < m.solicited.size() && outstanding == nullptr; ++n) {
        Solicited* s = m.solicited[n].get();
        if (s == nullptr || s->taken) continue;
        if (s->req.done.done()) {
          const Status& st = s->req.done.status();
          if (!st) {
            // note: mgr_mu_ is released first (fail_job does not return; the fatal path must
            // not find it held).
            failed = Status(st.code(), fmt::format("barrier {:#x}: node {}'s arrival: {}", id, n,
                                                   st.message()));
            from = n;
            break;
          }
          s->taken = true;
          took = true;
          from = n;
          arrival = std::move(s->req.reply);
          break;
        }
        outstanding = s;
      }
      const bool waits = failed.is_ok() && !took;
      if (waits && outstanding == nullptr) return;  // the rest come as requests
      // note: only the serving thread takes solicitations, and the episode cannot end before
      // `outstanding` is taken, so it stays alive while this thread waits for it.
      if (waits) m.serving = true;
    }
    if (!failed.is_ok()) comm_.fail_job(failed, from);
    if (took) {
      // A solicited arrival is node `from`'s reply to this node's solicitation.
      if (Status s = on_arrive(from, comm::ReplyTo{}, arrival.span()); !s)
        comm_.fail_bad_reply(from, msg::kBarrierArrive, s);
      continue;
    }
    const Status& st = comm_.wait(outstanding->req.done);
    // note: the wait ends when the arrival came (taken above) or failed (reported above).
    (void)st;
    MutexLock l(mgr_mu_);
    managed_[id].serving = false;
  }
}

Status BarrierService::on_arrive(comm::NodeId src, const comm::ReplyTo& reply,
                                 std::span<const std::byte> payload) {
  ByteReader r(payload);
  uint64_t answer_to, id, episode;
  uint32_t count, flags;
  if (!r.u64(&answer_to) || !r.u64(&id) || !r.u32(&count) || !r.u32(&flags) || !r.u64(&episode))
    return Status::malformed("barrier arrival: truncated");
  if (!has_tag(id, kBarrierTag) || (flags & ~kFlagCollect) != 0)
    return Status::malformed(fmt::format("barrier arrival: id {:#x}, flags {:#x}", id, flags));
  if (manager_of(id, nodes_) != me_)
    return Status::malformed(
        fmt::format("barrier {:#x}: an arrival at node {}, not its manager", id, me_));
  if (count < nodes_)
    return Status::malformed(
        fmt::format("barrier {:#x}: node {} arrived for {} arrivals, fewer than the {} nodes", id,
                    src, count, nodes_));
  // A request is answered as such; a solicited arrival names the request to answer.
  comm::ReplyTo to = reply;
  if (reply.valid() || src == me_) {
    if (answer_to != 0) return Status::malformed("barrier arrival: a request with a reply id");
  } else {
    if (answer_to == 0) return Status::malformed("barrier arrival: a solicited one without id");
    to = comm::ReplyTo{src, answer_to, msg::kBarrierArrive, /*waiter=*/true};
  }
  Result<VectorTime> vt = hl::read_vt(r, nodes_);
  if (!vt) return vt.status();
  Result<VectorTime> validated = hl::read_vt(r, nodes_);
  if (!validated) return validated.status();
  Result<std::vector<hl::Record>> recs = hl::read_records(r, nodes_, num_pages_);
  if (!recs) return recs.status();
  Result<Mail> mail = read_mail(r, nodes_, src);
  if (!mail) return mail.status();
  if (r.left() != 0) return Status::malformed("barrier arrival: trailing bytes");

  std::vector<std::byte> release;
  std::vector<Mail> post(nodes_);            // by destination
  std::vector<uint64_t> solicit(nodes_, 0);  // the next episode's solicitations, by node
  std::vector<comm::ReplyTo> replies;
  bool local = false;  // this node has waiters to release
  {
    MutexLock l(mgr_mu_);
    Managed& m = managed_[id];
    // note: every check of this arrival against the episode's (the count the first arrival set,
    // the episode, whether it completes the episode with every node) comes before any change:
    // a refused arrival leaves the episode as it was. The one that breaks the rule is named
    // (`src`); a program whose threads use one barrier with different counts, or arrive again
    // before their node got the release, breaks it too.
    if (m.arrived > 0 && count != m.count)
      return Status::malformed(fmt::format(
          "barrier {:#x}: node {} arrived for {} arrivals, node {} for {}; every use of a barrier "
          "must give the same count",
          id, src, count, m.count_from, m.count));
    if (episode != m.episode)
      return Status::malformed(fmt::format(
          "barrier {:#x}: node {} arrived for episode {} during {}", id, src, episode, m.episode));
    if (m.arrived + 1 == count) {
      uint32_t arrived_nodes =
          m.arrived == 0 ? 0
                         : static_cast<uint32_t>(std::count(m.from.begin(), m.from.end(), true));
      if (m.arrived == 0 || !m.from[src]) ++arrived_nodes;
      if (arrived_nodes != nodes_)
        return Status::invalid_argument(fmt::format(
            "barrier {:#x}: an episode of {} arrivals completed with threads of only {} of the {} "
            "nodes; Loom barriers need at least one thread of every node in each episode",
            id, count, arrived_nodes, nodes_));
      // Each node's first arrival answers the solicitation its last release carried, and the
      // episode cannot complete without it: a node whose arrivals are all in, none of them that
      // answer, ignored its release (the manager's thread serving the solicitation would wait
      // for it forever).
      for (comm::NodeId n = 0; n < m.solicited.size(); ++n) {
        const Solicited* sol = m.solicited[n].get();
        if (n == me_ || sol == nullptr || sol->taken) continue;
        Status bad = Status::malformed(fmt::format(
            "barrier {:#x}: episode {} completes, but no arrival of node {} answered the "
            "solicitation in its release",
            id, m.episode, n));
        if (n != src) comm_.report_bad_input(n, msg::kBarrierArrive, /*reply=*/false, bad);
        return bad;
      }
    }
    if (m.solicited.empty()) m.solicited.resize(nodes_);
    if (m.arrived == 0) {
      m.count = count;
      m.count_from = src;
      m.from.assign(nodes_, false);
      m.max_vt.assign(nodes_, 0);
      m.collect = false;
      m.min_validated = *validated;
      m.mail.assign(nodes_, {});
    }
    ++m.arrived;
    m.from[src] = true;
    for (uint32_t w = 0; w < nodes_; ++w) {
      m.max_vt[w] = std::max(m.max_vt[w], (*vt)[w]);
      m.min_validated[w] = std::min(m.min_validated[w], (*validated)[w]);
    }
    m.collect = m.collect || (flags & kFlagCollect) != 0;
    if (to.valid()) m.replies.push_back(to);
    for (auto& item : *mail) m.mail[item.node].push_back({src, std::move(item.blob)});
    for (hl::Record& rec : *recs) {
      auto key = std::make_pair(rec.writer, rec.interval);
      m.records.try_emplace(key, std::move(rec));
    }
    if (m.arrived < m.count) return Status::ok();
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
    post.swap(m.mail);
    // Solicit every other node's next arrival. Every node arrived in this episode, each first
    // arrival answering its solicitation if it had one; so every solicitation is taken.
    for (comm::NodeId n = 0; n < nodes_; ++n) {
      if (n == me_) continue;
      std::unique_ptr<Solicited>& s = m.solicited[n];
      LOOM_CHECK(s == nullptr || s->taken || comm_.cancel(s->id),
                 "barrier {:#x}: episode {} ends with node {}'s arrival unprocessed", id, m.episode,
                 n);
      s = std::make_unique<Solicited>();
      s->id = comm_.expect_reply(n, &s->req);
      solicit[n] = s->id;
    }
    m.serving = false;  // nobody serves the next episode yet
    m.prev_vt = m.max_vt;
    m.has_prev = true;
    m.records.clear();
    m.arrived = 0;
    ++m.episode;
    counters_.episodes_managed.fetch_add(1, std::memory_order_relaxed);
  }
  // Each node's release: the common part, then its mail and its solicitation, written in place
  // of the previous node's (a reply's payload may be reused once reply() returns).
  const size_t common = release.size();
  auto release_for = [&](comm::NodeId node) -> std::span<const std::byte> {
    release.resize(common);
    ByteWriter w(&release);
    write_mail(w, post[node]);
    w.u64(solicit[node]);
    return release;
  };
  // note: replies first; the local waiters' release (notices, garbage collection) can wait.
  std::vector<bool> answered(nodes_, false);
  for (const comm::ReplyTo& to : replies) {
    const bool first = !answered[to.node];
    answered[to.node] = true;
    Status s = first ? comm_.reply(to, release_for(to.node))
                     : comm_.reply(to, std::span<const std::byte>());
    LOOM_CHECK(s.is_ok(), "barrier {:#x}: sending the release to node {}: {}", id, to.node,
               s.to_string());
  }
  if (local) {
    // note: the release is this node's, but what it stores (the notices and mail of every
    // arrival) came from the others: a failure is that of the arrival that completed the episode
    // (its sender is named), the episode's other arrivals having been taken as they came.
    if (Status s = on_release(me_, id, release_for(me_)); !s)
      return Status(s.code(), fmt::format("barrier {:#x}: release: {}", id, s.message()));
  }
  return Status::ok();
}

Status BarrierService::on_release(comm::NodeId mgr, uint64_t arrived_at,
                                  std::span<const std::byte> payload) {
  ByteReader r(payload);
  uint64_t id, episode;
  uint32_t has_floor;
  if (!r.u64(&id) || !has_tag(id, kBarrierTag) || !r.u64(&episode))
    return Status::malformed("barrier release: bad header");
  if (id != arrived_at)
    return Status::malformed(
        fmt::format("a release of barrier {:#x} for an arrival at barrier {:#x}", id, arrived_at));
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
  // Store the notices and the mail before any waiter runs.
  if (Status s = consistency_.store_notices(r); !s) return s;
  Result<Mail> mail = read_mail(r, nodes_, me_);
  if (!mail) return mail.status();
  uint64_t solicitation;
  if (!r.u64(&solicitation)) return Status::malformed("barrier release: truncated");
  if (r.left() != 0) return Status::malformed("barrier release: trailing bytes");
  if (mgr == me_ && solicitation != 0)
    return Status::malformed("barrier release: the manager solicits itself");
  for (const auto& item : *mail)
    if (Status s = consistency_.take_barrier_mail(item.node, item.blob); !s) return s;
  std::vector<Waiter*> wake;
  {
    MutexLock l(mu_);
    NodeBarrier& nb = bars_[id];
    if (episode != nb.episode)
      return Status::malformed(
          fmt::format("barrier {:#x}: release of episode {} during {}", id, episode, nb.episode));
    ++nb.episode;
    nb.base = std::move(*vt);
    // note: a thread of the manager waits for the solicited arrival, or takes it on arriving.
    nb.solicited = solicitation != 0
                       ? comm::ReplyTo{mgr, solicitation, msg::kBarrierArrive, /*waiter=*/true}
                       : comm::ReplyTo{};
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

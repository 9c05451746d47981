#include "protocols/protocol.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>

#include "base/log.h"
#include "protocols/hlrc/hlrc.h"
#include "protocols/lrc/lrc_mw.h"
#include "protocols/owner/owner.h"
#include "protocols/single/single_owner.h"

namespace loom::protocols {
namespace {

struct Entry {
  std::string name;
  ProtocolFactory factory;
};

std::atomic<bool> g_frozen{false};

std::vector<Entry>& registry() {
  // The built-in protocols, in id order. HLRC is id 0: it keeps the write notices of the node
  // (Platform) and manages a program's static data (docs/parmacs.md).
  static std::vector<Entry> entries = {
      {"hlrc",
       [](const Core& c) -> std::unique_ptr<Protocol> {
         hlrc::Hlrc::Options o;
         if (c.config != nullptr) {
           o.prefetch = c.config->get_bool("PREFETCH");
           o.migrate_after = static_cast<uint32_t>(c.config->get_int("HOME_MIGRATION"));
           o.thin_offers = c.config->get_bool("THIN_OFFERS");
         }
         return std::make_unique<hlrc::Hlrc>(c.comm, c.frames, c.table, c.heap, o);
       }},
      {"sc_mrsw",
       [](const Core& c) -> std::unique_ptr<Protocol> {
         return std::make_unique<owner::OwnerProtocol>(c, owner::Mode::kSequential);
       }},
      {"erc_sw",
       [](const Core& c) -> std::unique_ptr<Protocol> {
         return std::make_unique<owner::OwnerProtocol>(c, owner::Mode::kEagerRelease);
       }},
      {"lrc_mw",
       [](const Core& c) -> std::unique_ptr<Protocol> { return std::make_unique<lrc::LrcMw>(c); }},
      {"single_owner",
       [](const Core& c) -> std::unique_ptr<Protocol> {
         return std::make_unique<single::SingleOwner>(c);
       }},
      {"hybrid",
       [](const Core& c) -> std::unique_ptr<Protocol> {
         return std::make_unique<single::SingleOwner>(c, single::Variant::kHybrid);
       }},
      {"hlrc_update",
       [](const Core& c) -> std::unique_ptr<Protocol> {
         return std::make_unique<single::SingleOwner>(c, single::Variant::kUpdate);
       }},
  };
  return entries;
}

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 32) return false;
  for (char ch : name)
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_')) return false;
  return true;
}

}  // namespace

void protect_runs(memory::PageFrames& frames, std::vector<memory::PageId> pages,
                  memory::Prot prot) {
  std::sort(pages.begin(), pages.end());
  size_t i = 0;
  while (i < pages.size()) {
    size_t j = i + 1;
    while (j < pages.size() && pages[j] == pages[j - 1] + 1) ++j;
    frames.protect(pages[i], j - i, prot);
    i = j;
  }
}

void in_stripe_batches(memory::PageTable& table, const std::vector<memory::PageId>& pages,
                       const std::function<void(const std::vector<memory::PageId>&)>& fn) {
  for (size_t b0 = 0; b0 < pages.size(); b0 += kStripeBatch) {
    std::vector<memory::PageId> batch(
        pages.begin() + static_cast<ptrdiff_t>(b0),
        pages.begin() + static_cast<ptrdiff_t>(std::min(pages.size(), b0 + kStripeBatch)));
    memory::PageTable::StripeSet locks(table, batch);
    fn(batch);
  }
}

comm::MsgType Core::msg(uint32_t i) const {
  LOOM_CHECK(i < kMsgTypesPerProtocol, "protocol {} asked for message type {} of {}", id, i,
             kMsgTypesPerProtocol);
  return static_cast<comm::MsgType>(comm::msg_range::kProtocols + id * kMsgTypesPerProtocol + i);
}

Status register_protocol(std::string name, ProtocolFactory factory) {
  if (g_frozen.load())
    return Status::invalid_argument(
        fmt::format("register_protocol({}): protocols must be registered before loom::init", name));
  if (!valid_name(name))
    return Status::invalid_argument(
        fmt::format("register_protocol('{}'): a protocol name is 1 to 32 of [a-z0-9_]", name));
  if (!factory)
    return Status::invalid_argument(fmt::format("register_protocol({}): no factory", name));
  std::vector<Entry>& r = registry();
  for (const Entry& e : r)
    if (e.name == name)
      return Status::invalid_argument(
          fmt::format("register_protocol({}): a protocol of that name exists", name));
  if (r.size() >= kMaxProtocols)
    return Status::resource(
        fmt::format("register_protocol({}): at most {} protocols", name, kMaxProtocols));
  r.push_back({std::move(name), std::move(factory)});
  return Status::ok();
}

std::vector<std::string> protocol_names() {
  std::vector<std::string> out;
  for (const Entry& e : registry()) out.push_back(e.name);
  return out;
}

Status check_page_protocol(memory::PageId page, const memory::PageEntry& e, ProtocolId mine,
                           std::string_view what) {
  if (e.protocol == memory::kProtocolUnknown || e.protocol == mine) return Status::ok();
  const std::vector<Entry>& r = registry();
  return Status::malformed(fmt::format("{} for page {}, a page of another protocol ({})", what,
                                       page,
                                       e.protocol < r.size() ? r[e.protocol].name : "unknown"));
}

ProtocolId protocol_id(std::string_view name) {
  const std::vector<Entry>& r = registry();
  for (size_t k = 0; k < r.size(); ++k)
    if (r[k].name == name) return static_cast<ProtocolId>(k);
  return memory::kProtocolUnknown;
}

std::unique_ptr<Protocol> make_protocol(ProtocolId id, const Core& core) {
  const std::vector<Entry>& r = registry();
  LOOM_CHECK(id < r.size(), "no protocol with id {} ({} registered)", id, r.size());
  std::unique_ptr<Protocol> p = r[id].factory(core);
  LOOM_CHECK(p != nullptr, "the factory of protocol {} returned nothing", r[id].name);
  return p;
}

void freeze_protocols() { g_frozen.store(true); }

}  // namespace loom::protocols

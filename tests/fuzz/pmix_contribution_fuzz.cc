// Fuzz target: the decoder of a node's contribution to a collective when PMIx carries the
// bootstrap (comm/bootstrap/boot_wire.h, decode_pmix_contribution), as PmixBootstrap::allgather
// reads every other node's PMIx value.
//
// Input: the value's bytes.
// Oracle: the decoder never crashes; a value it accepts has a known step, a description without
// a newline and within its bound, and encodes back to exactly the same bytes.
#include <string>
#include <string_view>
#include <vector>

#include "comm/bootstrap/boot_wire.h"
#include "fuzz.h"

namespace loom::fuzz {

namespace boot = comm::boot;

std::vector<std::string> seeds() {
  std::vector<std::string> out;
  const std::string binary("\0\1\n|L\xff", 6);
  for (uint32_t k = 0; k <= boot::kMaxStep; ++k)
    for (const char* what : {"an application collective", "", "the start-up barrier"})
      for (const std::string& data : {std::string(), std::string("0123456789abcdef"), binary})
        out.push_back(boot::encode_pmix_contribution(
            boot::PmixContribution{static_cast<boot::Step>(k), what, data}));
  return out;
}

}  // namespace loom::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace loom;
  const std::string_view value(reinterpret_cast<const char*>(data), size);
  Result<comm::boot::PmixContribution> c = comm::boot::decode_pmix_contribution(value);
  if (!c) return 0;
  if (static_cast<uint32_t>(c->kind) > comm::boot::kMaxStep)
    fuzz::fail("a contribution accepted at an unknown step");
  if (c->what.find('\n') != std::string::npos || c->what.size() > comm::boot::kMaxPmixWhat)
    fuzz::fail("a contribution accepted with a description the encoder refuses");
  if (comm::boot::encode_pmix_contribution(*c) != value)
    fuzz::fail("an accepted contribution does not encode back to the same bytes");
  return 0;
}

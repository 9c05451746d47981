// make_bootstrap() and the one-node bootstrap.
#include "comm/bootstrap/bootstrap.h"

#include <fmt/format.h>

#include <cstdlib>

#include "comm/bootstrap/boot_wire.h"
#include "comm/bootstrap/bootstrap_impl.h"

namespace loom::comm {
namespace internal {
namespace {

// A job of one node. Collectives return this node's contribution; nothing can fail.
// Thread safety: stateless after construction.
class SingleBootstrap final : public Bootstrap {
 public:
  explicit SingleBootstrap(std::string token) : token_(std::move(token)) {}
  std::string_view name() const override { return "single"; }
  NodeId rank() const override { return 0; }
  uint32_t size() const override { return 1; }
  const std::string& job_token() const override { return token_; }
  Result<std::vector<std::string>> allgather(std::string_view mine) override {
    return std::vector<std::string>{std::string(mine)};
  }
  Status barrier() override { return Status::ok(); }

 private:
  const std::string token_;
};

}  // namespace

Result<std::unique_ptr<Bootstrap>> make_single_bootstrap() {
  auto token = boot::random_token();
  if (!token) return token.status();
  return std::unique_ptr<Bootstrap>(new SingleBootstrap(std::move(*token)));
}

}  // namespace internal

namespace {

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && v[0] != '\0';
}

}  // namespace

Result<std::unique_ptr<Bootstrap>> make_bootstrap(const Config& config) {
  std::string kind = config.get_string("BOOTSTRAP");
  if (kind == "auto") {
    if (!config.get_string("BOOT_ADDR").empty())
      kind = "loomrun";
    else if (env_set("PMIX_RANK") || env_set("PMIX_NAMESPACE"))
      kind = "pmix";
    else
      kind = "single";
  }
  if (kind == "loomrun") return internal::make_loomrun_bootstrap(config);
  if (kind == "pmix") return internal::make_pmix_bootstrap(config);
  if (kind == "single") return internal::make_single_bootstrap();
  return Status::invalid_argument(fmt::format("unknown LOOM_BOOTSTRAP '{}'", kind));
}

}  // namespace loom::comm

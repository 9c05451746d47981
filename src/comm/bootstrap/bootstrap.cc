// make_bootstrap() and the one-node bootstrap.
#include "comm/bootstrap/bootstrap.h"

#include <fmt/format.h>

#include <poll.h>

#include <cerrno>
#include <chrono>
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
  using Bootstrap::allgather;
  Result<std::vector<std::string>> allgather(std::string_view mine, const Step&) override {
    return std::vector<std::string>{std::string(mine)};
  }

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

Status Bootstrap::await_failure(int timeout_ms) {
  int fd = event_fd();
  if (fd < 0) return Status::ok();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    if (Status s = handle_event(); !s) return s;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) return Status::ok();
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) < 0 && errno != EINTR) return Status::ok();
  }
}

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

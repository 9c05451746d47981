#include "stats.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "sys.h"

namespace loom::loomrun {

bool merge_stats(const std::string& pattern, uint32_t nodes, const std::string& out_path,
                 const std::string& stopped) {
  nlohmann::json merged = nlohmann::json::array();
  bool partial = !stopped.empty();
  for (uint32_t r = 0; r < nodes; ++r) {
    std::string path = pattern;
    size_t at = path.find("%r");
    if (at != std::string::npos) path.replace(at, 2, std::to_string(r));
    std::ifstream in(path);
    if (!in) {
      warn(fmt::format("node {} wrote no statistics ({}: {})", r, path, std::strerror(errno)));
      merged.push_back(nullptr);
      partial = true;
      continue;
    }
    std::stringstream text;
    text << in.rdbuf();
    auto j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      warn(fmt::format("node {}'s statistics in {} are not valid JSON", r, path));
      merged.push_back(nullptr);
      partial = true;
      continue;
    }
    if (j.is_object() && j.value("partial", false)) partial = true;
    merged.push_back(std::move(j));
  }
  nlohmann::json doc = {{"nodes", std::move(merged)}};
  if (partial) {
    doc["partial"] = true;
    if (!stopped.empty()) doc["stopped"] = stopped;
  }
  std::string text = doc.dump(2) + "\n";
  FILE* f = std::fopen(out_path.c_str(), "w");
  bool ok = f != nullptr && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  int err = errno;
  if (f != nullptr && std::fclose(f) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (!ok)
    say(fmt::format("cannot write --stats-json file '{}': {}", out_path, std::strerror(err)));
  return ok;
}

}  // namespace loom::loomrun

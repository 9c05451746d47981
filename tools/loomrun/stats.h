// --stats-json: merging the per-node statistics files into one.
//
// Each node writes a JSON object to LOOM_STATS_JSON with "%r" replaced by its rank. After the
// job, loomrun writes {"nodes": [<node 0>, <node 1>, ...]} to the user's file; a node whose file
// is missing or not valid JSON gets null, with a warning naming it.
//
// Thread safety: a plain function.
#pragma once

#include <cstdint>
#include <string>

namespace loom::loomrun {

// `pattern` contains "%r". Returns false (after printing why) if `out_path` cannot be written.
bool merge_stats(const std::string& pattern, uint32_t nodes, const std::string& out_path);

}  // namespace loom::loomrun

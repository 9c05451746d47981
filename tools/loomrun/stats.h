// --stats-json: merging the per-node statistics files into one.
//
// Each node writes a JSON object to LOOM_STATS_JSON with "%r" replaced by its rank. After the
// job, loomrun writes {"nodes": [<node 0>, <node 1>, ...]} to the user's file; a node whose file
// is missing or not valid JSON gets null, with a warning naming it. A job that did not end
// normally (stopped by --timeout, a signal or a failure) still gets its file, with "partial":
// true and "stopped" saying why; so does a job in which a node's counters are missing or partial
// (a node stopped by a signal writes what it has, marked "partial").
//
// Thread safety: a plain function.
#pragma once

#include <cstdint>
#include <string>

namespace loom::loomrun {

// `pattern` contains "%r". Returns false (after printing why) if `out_path` cannot be written.
// `stopped` is empty for a job that ended normally, else why it stopped.
bool merge_stats(const std::string& pattern, uint32_t nodes, const std::string& out_path,
                 const std::string& stopped);

}  // namespace loom::loomrun

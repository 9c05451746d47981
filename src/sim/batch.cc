#include "sim/batch.h"

#include "sim/programs.h"

namespace loom::sim {

Options batch_options(const BatchOptions& options, uint64_t program_seed) {
  if (options.mode == SettingsMode::kDefault) return options.base;
  return draw_settings(options.base, program_seed, options.fixed);
}

BatchResult run_batch(const BatchOptions& options) {
  BatchResult r;
  for (uint64_t i = 0; i < options.count; ++i) {
    const uint64_t s = options.seed + i;
    const Program p = options.litmus ? litmus(*options.litmus) : batch_program(s);
    const bool is_litmus = options.litmus || s % 4 == 0;
    Options o = batch_options(options, s);
    for (const Setting& setting : settings())
      if (setting.applies_to(o.protocol)) ++r.drawn[std::string(setting.name)][setting.get(o)];
    for (uint64_t j = 0; j < options.schedules; ++j) {
      o.seed = j == 0 ? s : s ^ (j * 0x9e3779b97f4a7c15ull);
      if (options.starting) options.starting(s, j, o);
      CheckStats st;
      Status status = check_program(p, o, &st);
      if (!status) {
        r.failure = std::move(status);
        r.failed_seed = s;
        r.failed_schedule = j;
        r.failed_options = o;
        return r;
      }
      ++r.runs;
      r.reads += st.reads;
      r.writes += st.writes;
      r.messages += st.messages;
      r.fingerprint = r.fingerprint * 1000003 + st.trace_hash;
    }
    ++r.programs;
    if (is_litmus) ++r.litmus;
  }
  return r;
}

}  // namespace loom::sim

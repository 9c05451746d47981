// The checker's batches vary the protocol settings from program to program (sim/settings.h):
// every value of every setting that applies is drawn, the same seed draws the same settings and
// runs the same execution, a setting given as a flag is never drawn, and the default mode runs
// the defaults.
#include <gtest/gtest.h>

#include "sim/batch.h"
#include "sim/programs.h"
#include "sim/settings.h"

namespace loom::sim {
namespace {

BatchOptions batch(const std::string& protocol, uint64_t seed, uint64_t count) {
  BatchOptions b;
  b.seed = seed;
  b.count = count;
  b.base.protocol = protocol;
  return b;
}

// Fails if the settings stop varying: a batch reports how many programs ran with each value of
// each setting, and every value of every setting that applies to the protocol must have run.
// note: `programs` is the smallest batch from seed 1 that draws every value (the tests also run
// under the sanitizers); a value added to the table may need a larger one.
void expect_every_value_ran(const std::string& protocol, uint64_t programs) {
  BatchResult r = run_batch(batch(protocol, 1, programs));
  ASSERT_TRUE(r.failure.is_ok()) << r.failure.to_string();
  size_t applicable = 0;
  for (const Setting& s : settings()) {
    const std::string name(s.name);
    if (!s.applies_to(protocol)) {
      EXPECT_EQ(r.drawn.count(name), 0u) << name << " does not apply to " << protocol;
      continue;
    }
    ++applicable;
    uint64_t ran = 0;
    for (uint64_t v : s.values) {
      EXPECT_GT(r.drawn[name][v], 0u) << protocol << ": no program ran with " << name << "=" << v;
      ran += r.drawn[name][v];
    }
    EXPECT_EQ(ran, programs) << name << ": a value outside its list was drawn";
  }
  EXPECT_GE(applicable, 3u);
}

TEST(SettingsTest, EveryValueOfEverySettingRunsUnderHlrc) { expect_every_value_ran("hlrc", 24); }
TEST(SettingsTest, EveryValueOfEverySettingRunsUnderLrcMw) { expect_every_value_ran("lrc_mw", 24); }

TEST(SettingsTest, EveryProtocolSettingIsInTheTable) {
  // The settings that change what the protocols do, by the names of their loom-sim flags. A
  // setting removed from the table (or renamed) fails here.
  for (const char* name :
       {"home-migration", "push-pages", "prefetch", "fetch-ahead", "causal-fetch", "lazy-release",
        "lock-fairness", "notice-gc", "lrc-gc-bytes"}) {
    const Setting* s = find_setting(name);
    ASSERT_NE(s, nullptr) << name;
    EXPECT_GE(s->values.size(), 2u) << name << " does not vary";
    Options o;
    for (uint64_t v : s->values) {
      EXPECT_GE(v, s->min) << name;
      EXPECT_LE(v, s->max) << name;
      s->set(o, v);
      EXPECT_EQ(s->get(o), v) << name;
    }
  }
}

TEST(SettingsTest, SameSeedSameSettingsAndSameExecution) {
  BatchResult a = run_batch(batch("hlrc", 40, 8));
  BatchResult b = run_batch(batch("hlrc", 40, 8));
  ASSERT_TRUE(a.failure.is_ok()) << a.failure.to_string();
  EXPECT_EQ(a.fingerprint, b.fingerprint);
  EXPECT_EQ(a.drawn, b.drawn);
  // A program of a batch replays alone: `--check 1 --seed S` draws the settings it ran with.
  uint64_t folded = 0;
  for (uint64_t s = 40; s < 48; ++s) {
    BatchOptions one = batch("hlrc", s, 1);
    EXPECT_EQ(describe_settings(batch_options(one, s)),
              describe_settings(batch_options(batch("hlrc", 40, 8), s)));
    BatchResult r = run_batch(one);
    ASSERT_TRUE(r.failure.is_ok()) << r.failure.to_string();
    folded = folded * 1000003 + r.fingerprint;
  }
  EXPECT_EQ(folded, a.fingerprint);
}

TEST(SettingsTest, ExplicitFlagsReplayTheDrawnSettings) {
  // What a failure prints ("--settings default --home-migration 2 ...") gives the same options.
  for (uint64_t s = 1; s <= 50; ++s) {
    Options drawn = batch_options(batch("hlrc", s, 1), s);
    std::string flags = settings_flags(drawn);
    Options replayed;
    for (const Setting& st : settings()) {
      std::string key = " --" + std::string(st.name) + " ";
      size_t at = flags.find(key);
      if (at != std::string::npos) st.set(replayed, std::stoull(flags.substr(at + key.size())));
    }
    EXPECT_EQ(describe_settings(replayed), describe_settings(drawn)) << flags;
  }
}

TEST(SettingsTest, AFlagFixesItsSettingForEveryProgram) {
  BatchOptions b = batch("hlrc", 1, 12);
  find_setting("home-migration")->set(b.base, 3);
  b.fixed.insert("home-migration");
  BatchResult r = run_batch(b);
  ASSERT_TRUE(r.failure.is_ok()) << r.failure.to_string();
  EXPECT_EQ(r.drawn["home-migration"], (std::map<uint64_t, uint64_t>{{3, 12}}));
  EXPECT_GT(r.drawn["push-pages"].size(), 1u);  // the others still vary
}

TEST(SettingsTest, DefaultModeRunsTheDefaults) {
  BatchOptions b = batch("hlrc", 1, 8);
  b.mode = SettingsMode::kDefault;
  BatchResult r = run_batch(b);
  ASSERT_TRUE(r.failure.is_ok()) << r.failure.to_string();
  Options defaults;
  for (const auto& [name, counts] : r.drawn)
    EXPECT_EQ(counts, (std::map<uint64_t, uint64_t>{{find_setting(name)->get(defaults), 8}}))
        << name;
  // The same runs as check_program with default options: the fingerprint of the checker's runs
  // before settings varied.
  uint64_t folded = 0;
  for (uint64_t s = 1; s <= 8; ++s) {
    Options o;
    o.seed = s;
    CheckStats st;
    ASSERT_TRUE(check_program(batch_program(s), o, &st).is_ok());
    folded = folded * 1000003 + st.trace_hash;
  }
  EXPECT_EQ(r.fingerprint, folded);
}

}  // namespace
}  // namespace loom::sim

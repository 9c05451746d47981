#include "base/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

namespace loom {
namespace {

TEST(Config, Defaults) {
  Config c;
  EXPECT_EQ(c.get_int("SPIN_US"), 50);
  EXPECT_EQ(c.get_int("MAX_INFLIGHT_BYTES"), 32 << 20);
  EXPECT_FALSE(c.get_bool("TRACE"));
  EXPECT_EQ(c.get_string("BOOTSTRAP"), "auto");
}

TEST(Config, ParsesTypedValues) {
  Config c;
  ASSERT_TRUE(c.set("SPIN_US", "200").is_ok());
  EXPECT_EQ(c.get_int("SPIN_US"), 200);
  ASSERT_TRUE(c.set("MAX_INFLIGHT_BYTES", "64K").is_ok());
  EXPECT_EQ(c.get_int("MAX_INFLIGHT_BYTES"), 65536);
  ASSERT_TRUE(c.set("MAX_INFLIGHT_BYTES", "2G").is_ok());
  EXPECT_EQ(c.get_int("MAX_INFLIGHT_BYTES"), int64_t{2} << 30);
  ASSERT_TRUE(c.set("TRACE", "yes").is_ok());
  EXPECT_TRUE(c.get_bool("TRACE"));
  ASSERT_TRUE(c.set("BOOTSTRAP", "PMIX").is_ok());
  EXPECT_EQ(c.get_string("BOOTSTRAP"), "pmix");
}

TEST(Config, MalformedValuesNameTheVariable) {
  Config c;
  Status s = c.set("MAX_INFLIGHT_BYTES", "abc");
  ASSERT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("LOOM_MAX_INFLIGHT_BYTES='abc'"), std::string::npos) << s.message();
  EXPECT_FALSE(c.set("SPIN_US", "12x").is_ok());
  EXPECT_FALSE(c.set("SPIN_US", "-5").is_ok());        // below the minimum
  EXPECT_FALSE(c.set("SPIN_US", "99999999").is_ok());  // above the maximum
  EXPECT_FALSE(c.set("TRACE", "maybe").is_ok());
  EXPECT_FALSE(c.set("BOOTSTRAP", "ssh").is_ok());
  EXPECT_FALSE(c.set("NO_SUCH_THING", "1").is_ok());
  EXPECT_EQ(c.get_int("SPIN_US"), 50);  // unchanged by the failures
}

TEST(Config, FromEnvironment) {
  setenv("LOOM_HEARTBEAT_MS", "250", 1);
  Result<Config> c = Config::from_env();
  unsetenv("LOOM_HEARTBEAT_MS");
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->get_int("HEARTBEAT_MS"), 250);

  setenv("LOOM_PEER_TIMEOUT_MS", "soon", 1);
  Result<Config> bad = Config::from_env();
  unsetenv("LOOM_PEER_TIMEOUT_MS");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("LOOM_PEER_TIMEOUT_MS"), std::string::npos);
}

TEST(Config, FlagNamesAndHelpTable) {
  const ConfigRow* row = find_config_row("MAX_INFLIGHT_BYTES");
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(config_flag_name(*row), "--max-inflight-bytes");
  EXPECT_EQ(config_env_name(*row), "LOOM_MAX_INFLIGHT_BYTES");
  std::string table = format_config_table();
  for (const ConfigRow& r : config_table()) {
    if (r.internal) {
      EXPECT_EQ(table.find(config_env_name(r) + " "), std::string::npos) << r.name;
    } else {
      EXPECT_NE(table.find(config_env_name(r)), std::string::npos) << r.name;
    }
  }
}

}  // namespace
}  // namespace loom

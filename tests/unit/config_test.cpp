// Configuration: defaults, environment, caller fields, and clear errors for
// values that do not parse (upstream silently ignored them).
#include "core/config.h"
#include "capi/options.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace nexar {
namespace {

struct EnvGuard {
  const char *name;
  EnvGuard(const char *n, const char *v) : name(n) { setenv(n, v, 1); }
  ~EnvGuard() { unsetenv(name); }
};

TEST(Config, Defaults) {
  nexar_comm_options_t o;
  ASSERT_TRUE(init_options_from_env(&o, sizeof o).ok());
  EXPECT_EQ(o.struct_size, sizeof o);
  EXPECT_EQ(o.collective_timeout_ms, 30000u);
  EXPECT_EQ(o.large_msg_bytes, 8u << 20);
  EXPECT_EQ(o.rank, -1);
  EXPECT_EQ(o.completion_mode, uint32_t{NEXAR_COMPLETION_THREAD});
}

TEST(Config, EnvironmentApplies) {
  EnvGuard a("NEXAR_COLLECTIVE_TIMEOUT_SECS", "2.5");
  EnvGuard b("NEXAR_LARGE_MSG_BYTES", "4M");
  EnvGuard c("NEXAR_COMPLETION_MODE", "polled");
  EnvGuard d("NEXAR_RANK", "3");
  nexar_comm_options_t o;
  ASSERT_TRUE(init_options_from_env(&o, sizeof o).ok());
  EXPECT_EQ(o.collective_timeout_ms, 2500u);
  EXPECT_EQ(o.large_msg_bytes, 4u << 20);
  EXPECT_EQ(o.completion_mode, uint32_t{NEXAR_COMPLETION_POLLED});
  EXPECT_EQ(o.rank, 3);
}

TEST(Config, BadValuesAreErrorsNamingTheVariable) {
  for (auto [name, value] :
       {std::pair{"NEXAR_COLLECTIVE_TIMEOUT_SECS", "soon"},
        std::pair{"NEXAR_LARGE_MSG_BYTES", "12Q"}, std::pair{"NEXAR_RING_MAX_WORLD", "-1"},
        std::pair{"NEXAR_COMPLETION_MODE", "sometimes"},
        std::pair{"NEXAR_BARRIER_TIMEOUT_SECS", "0"}}) {
    EnvGuard g(name, value);
    nexar_comm_options_t o;
    Status s = init_options_from_env(&o, sizeof o);
    EXPECT_EQ(s.code, NEXAR_ERR_INVALID_ARGUMENT) << name;
    EXPECT_NE(s.message.find(name), std::string::npos) << s.message;
  }
}

TEST(Config, DirectReadsAreMeasuredForcedOrOff) {
  nexar_comm_options_t o;
  ASSERT_TRUE(init_options_from_env(&o, sizeof o).ok());
  Config c;
  ASSERT_TRUE(config_from_options(&o, &c).ok());
  EXPECT_EQ(c.shm_cma, Config::ShmCma::Auto);
  for (auto [value, want] :
       {std::pair{"auto", Config::ShmCma::Auto}, std::pair{"on", Config::ShmCma::On},
        std::pair{"OFF", Config::ShmCma::Off}}) {
    EnvGuard g("NEXAR_SHM_CMA", value);
    Config v;
    ASSERT_TRUE(config_from_options(&o, &v).ok()) << value;
    EXPECT_EQ(v.shm_cma, want) << value;
  }
  EnvGuard g("NEXAR_SHM_CMA", "always");
  Status s = config_from_options(&o, &c);
  EXPECT_EQ(s.code, NEXAR_ERR_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("NEXAR_SHM_CMA"), std::string::npos) << s.message;
}

TEST(Config, OlderSmallerStructsKeepDefaultsForNewFields) {
  nexar_comm_options_t o;
  const size_t old_size = offsetof(nexar_comm_options_t, barrier_timeout_ms);
  ASSERT_TRUE(init_options_from_env(&o, old_size).ok());
  o.collective_timeout_ms = 1234;
  Config c;
  ASSERT_TRUE(config_from_options(&o, &c).ok());
  EXPECT_EQ(c.collective_timeout_ms, 1234u);
  EXPECT_EQ(c.barrier_timeout_ms, 30000u) << "fields the caller's struct lacks keep defaults";
}

TEST(Config, CallerValuesAreChecked) {
  nexar_comm_options_t o;
  ASSERT_TRUE(init_options_from_env(&o, sizeof o).ok());
  o.p2p_timeout_ms = 0;
  Config c;
  EXPECT_EQ(config_from_options(&o, &c).code, NEXAR_ERR_INVALID_ARGUMENT);
  o.p2p_timeout_ms = 10;
  o.completion_mode = 7;
  EXPECT_EQ(config_from_options(&o, &c).code, NEXAR_ERR_INVALID_ARGUMENT);
}

TEST(Config, Sizes) {
  uint64_t v = 0;
  EXPECT_TRUE(parse_bytes("64KiB", &v).ok());
  EXPECT_EQ(v, 64u << 10);
  EXPECT_TRUE(parse_bytes("2g", &v).ok());
  EXPECT_EQ(v, 2ull << 30);
  EXPECT_FALSE(parse_bytes("", &v).ok());
  EXPECT_FALSE(parse_bytes("99999999999999999999G", &v).ok());
}

}  // namespace
}  // namespace nexar

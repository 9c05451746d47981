// The PMIx bootstrap for real, under Open MPI's mpirun (skipped when mpirun is not installed).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <set>

#include "subprocess.h"

namespace loom::testing {
namespace {

const std::string kProbe = BOOT_PROBE_PATH;

std::string find_mpirun() {
  const char* path = std::getenv("PATH");
  std::string p = path != nullptr ? path : "/usr/bin:/bin";
  size_t pos = 0;
  while (pos <= p.size()) {
    size_t colon = p.find(':', pos);
    if (colon == std::string::npos) colon = p.size();
    std::string candidate = p.substr(pos, colon - pos) + "/mpirun";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    pos = colon + 1;
  }
  return "";
}

class PmixTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mpirun_ = find_mpirun();
    if (mpirun_.empty()) GTEST_SKIP() << "mpirun is not on PATH; the PMIx bootstrap is not tested";
  }
  RunResult mpirun(std::vector<std::string> args, double timeout_s = 60) {
    std::vector<std::string> argv = {mpirun_, "--allow-run-as-root", "--oversubscribe"};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(argv, {"TMPDIR=" + tmp_.path()}, timeout_s);
  }
  std::string mpirun_;
  ScratchDir tmp_;
};

TEST_F(PmixTest, TwoRanksBootstrapAndGather) {
  auto r = mpirun({"-n", "2", kProbe, "--rounds", "3"});
  ASSERT_FALSE(r.timed_out) << r.out << r.err;
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(count(r.out, "rank 0 size 2 pid"), 1) << r.out << r.err;
  EXPECT_EQ(count(r.out, "rank 1 size 2 pid"), 1) << r.out << r.err;
  EXPECT_EQ(count(r.out, "rank 0 allgather ok"), 1) << r.out;
  EXPECT_EQ(count(r.out, "rank 1 allgather ok"), 1) << r.out;
  std::set<std::string> tokens;
  for (const auto& l : lines(r.out))
    if (l.rfind("token ", 0) == 0) tokens.insert(l.substr(6));
  ASSERT_EQ(tokens.size(), 1u) << "ranks disagree on the job token:\n" << r.out;
  EXPECT_EQ(tokens.begin()->size(), 32u);
}

// mpirun's own policy: when a process dies, it kills the rest of the job. Nobody hangs in a fence.
TEST_F(PmixTest, DeadRankDoesNotLeaveOthersHanging) {
  auto r = mpirun({"-n", "3", kProbe, "--rank", "1", "--kill", "9"}, 60);
  EXPECT_FALSE(r.timed_out) << r.out << r.err;
  EXPECT_NE(r.status, 0) << r.out << r.err;
  EXPECT_LT(r.seconds, 30);
}

// With --enable-recovery mpirun lets the survivors run: their fence must fail with a Status.
TEST_F(PmixTest, DeadRankMakesTheFenceFailWithAStatus) {
  auto r = mpirun({"--enable-recovery", "-n", "3", kProbe, "--rank", "1", "--kill", "9"}, 60);
  EXPECT_FALSE(r.timed_out) << r.out << r.err;
  EXPECT_LT(r.seconds, 30);
  for (int rank : {0, 2})
    EXPECT_NE(r.out.find("rank " + std::to_string(rank) + ": allgather: peer failed: PMIx_Fence "
                                                            "failed"),
              std::string::npos)
        << r.out << r.err;
}

}  // namespace
}  // namespace loom::testing

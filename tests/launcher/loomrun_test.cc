// The real loomrun binary on boot_probe (and plain programs): ranks, collectives, output
// forwarding, failure handling, exit statuses, timeouts, signals, usage errors, statistics, and
// that the private temporary directory is always removed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

#include "comm/bootstrap/boot_wire.h"
#include "subprocess.h"

namespace loom::testing {
namespace {

namespace bw = comm::boot;

const std::string kLoomrun = LOOMRUN_PATH;

class LoomrunTest : public ::testing::Test {
 protected:
  // loomrun's TMPDIR, checked to be empty afterwards.
  ScratchDir tmp_;
  ScratchDir work_;

  void TearDown() override {
    EXPECT_TRUE(tmp_.entries().empty()) << "loomrun left " << tmp_.entries().front() << " behind";
  }

  std::vector<std::string> env(std::vector<std::string> extra = {}) {
    extra.push_back("TMPDIR=" + tmp_.path());
    return extra;
  }

  RunResult loomrun(std::vector<std::string> args, std::vector<std::string> extra_env = {},
                    double timeout_s = 30) {
    args.insert(args.begin(), kLoomrun);
    return run(args, env(std::move(extra_env)), timeout_s);
  }
};

// The pid of node `rank` as the probe printed it ("rank R size N pid P").
pid_t probe_pid(const std::string& out, int rank) {
  std::smatch m;
  std::regex re("rank " + std::to_string(rank) + " size \\d+ pid (\\d+)");
  if (!std::regex_search(out, m, re)) return -1;
  return static_cast<pid_t>(std::stol(m[1]));
}

void expect_one_line(const RunResult& r, const std::string& starts_with) {
  EXPECT_EQ(r.status, 2) << r.err;
  EXPECT_EQ(r.out, "");
  auto ls = lines(r.err);
  ASSERT_EQ(ls.size(), 1u) << r.err;
  EXPECT_EQ(ls[0].rfind(starts_with, 0), 0u) << ls[0];
}

TEST_F(LoomrunTest, OneNode) {
  auto r = loomrun({"-n", "1", kProbe});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(count(r.out, "rank 0 size 1 pid"), 1) << r.out;
  EXPECT_EQ(count(r.out, "rank 0 allgather ok"), 1) << r.out;
  EXPECT_EQ(r.err, "");
}

TEST_F(LoomrunTest, FourNodesGetDistinctRanksAndGatherCorrectly) {
  auto r = loomrun({"-n", "4", kProbe, "--rounds", "3"});
  EXPECT_EQ(r.status, 0) << r.err;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(count(r.out, "rank " + std::to_string(i) + " size 4 pid"), 1) << r.out;
    EXPECT_EQ(count(r.out, "rank " + std::to_string(i) + " allgather ok"), 1) << r.out;
  }
  // One token for the whole job.
  std::set<std::string> tokens;
  for (const auto& l : lines(r.out))
    if (l.rfind("token ", 0) == 0) tokens.insert(l);
  EXPECT_EQ(tokens.size(), 1u) << r.out;
}

TEST_F(LoomrunTest, PlainProgramsRunAndArgumentsPassUntouched) {
  auto r = loomrun({"-n", "2", "echo", "-n", "--tag-output", "x"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "--tag-output x--tag-output x");
  auto env = loomrun({"-n", "1", "--", "sh", "-c", "echo $LOOM_RANK/$LOOM_SIZE"});
  EXPECT_EQ(env.out, "0/1\n");
}

TEST_F(LoomrunTest, TagOutputPrefixesEveryLineAndFlushesPartialLines) {
  auto r = loomrun({"-n", "2", "--tag-output", "sh", "-c", "echo out; echo err >&2; printf tail"});
  EXPECT_EQ(r.status, 0) << r.err;
  for (std::string rank : {"0", "1"}) {
    EXPECT_EQ(count(r.out, "[" + rank + "] out\n"), 1) << r.out;
    EXPECT_EQ(count(r.out, "[" + rank + "] tail\n"), 1) << r.out;
    EXPECT_EQ(count(r.err, "[" + rank + "] err\n"), 1) << r.err;
  }
  auto alias = loomrun({"-n", "1", "--prefix", "echo", "x"});
  EXPECT_EQ(alias.out, "[0] x\n");
}

TEST_F(LoomrunTest, ConfigFlagsAndStatsBecomeEnvironment) {
  auto r = loomrun({"-n", "1", "--spin-us", "7", "--trace", "yes", "--max-inflight-bytes", "64K",
                    "--stats", "sh", "-c",
                    "echo $LOOM_SPIN_US $LOOM_TRACE $LOOM_MAX_INFLIGHT_BYTES "
                    "$LOOM_STATS"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "7 1 65536 1\n");
}

TEST_F(LoomrunTest, NodeExitStatusPropagatesAndNamesTheNode) {
  auto r = loomrun({"-n", "3", kProbe, "--rank", "1", "--exit", "3"});
  EXPECT_EQ(r.status, 3) << r.err;
  pid_t pid = probe_pid(r.out, 1);
  EXPECT_NE(r.err.find("loomrun: node 1 (pid " + std::to_string(pid) + ") exited with status 3"),
            std::string::npos)
      << r.err;
}

TEST_F(LoomrunTest, KilledNodeFailsTheJobAndOthersAreTold) {
  auto r = loomrun({"-n", "4", kProbe, "--rank", "2", "--kill", "9"}, {}, 20);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.status, 137) << r.err;
  EXPECT_LT(r.seconds, 10);
  pid_t pid = probe_pid(r.out, 2);
  std::string what = "node 2 (pid " + std::to_string(pid) + ") was killed by signal 9 (Killed)";
  EXPECT_EQ(count(r.err, "loomrun: " + what), 1) << r.err;
  // Every other node heard it through PEER_FAILED and exited on its own.
  for (int rank : {0, 1, 3})
    EXPECT_NE(r.out.find("rank " + std::to_string(rank) + ": "), std::string::npos) << r.out;
  EXPECT_EQ(count(r.out, "peer failed: " + what), 3) << r.out;
  EXPECT_EQ(r.err.find("killing"), std::string::npos) << "nodes needed SIGKILL:\n" << r.err;
}

TEST_F(LoomrunTest, AbortStopsTheJob) {
  auto r = loomrun({"-n", "3", kProbe, "--rank", "1", "--abort", "disk full"}, {}, 20);
  EXPECT_EQ(r.status, 1) << r.err;
  pid_t pid = probe_pid(r.out, 1);
  EXPECT_NE(
      r.err.find("loomrun: node 1 (pid " + std::to_string(pid) + ") aborted the job: disk full"),
      std::string::npos)
      << r.err;
  EXPECT_EQ(count(r.out, "peer failed: node 1 aborted the job: disk full"), 2) << r.out;
}

TEST_F(LoomrunTest, NodeLeavingWithoutByeIsAFailure) {
  auto r = loomrun({"-n", "2", kProbe, "--rank", "0", "--no-bye"}, {}, 20);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("loomrun: node 0 (pid"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("without saying goodbye"), std::string::npos) << r.err;
}

TEST_F(LoomrunTest, MismatchedCollectivesFailInsteadOfHanging) {
  // Node 1 enters a barrier that node 0, which has exited, will never join.
  auto r = loomrun({"-n", "2", kProbe, "--rank", "1", "--extra-barriers", "1"}, {}, 20);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("node 0 (pid"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("left the job without joining collective #"), std::string::npos) << r.err;
}

TEST_F(LoomrunTest, StrayConnectionsDoNotKeepTheNodesOut) {
  // Before the nodes connect, 100 connections that never say HELLO and one that announces a
  // 64 MiB frame: the nodes still get in (it was: after 34 the job could not start), and loomrun
  // does not buffer the big frame.
  auto r =
      loomrun({"-n", "3", kProbe, "--rank", "0", "--flood", "100", "--others-delay", "1"}, {}, 30);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(count(r.out, "rank " + std::to_string(i) + " allgather ok"), 1) << r.out << r.err;
  EXPECT_NE(r.err.find("more than 4096 bytes before a complete HELLO"), std::string::npos) << r.err;
}

TEST_F(LoomrunTest, TimeoutStopsTheJobWith124) {
  auto r = loomrun({"-n", "2", "--timeout", "1", kProbe, "--sleep", "30"}, {}, 20);
  EXPECT_EQ(r.status, 124) << r.err;
  EXPECT_NE(r.err.find("loomrun: timeout after 1 s"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 5);
}

TEST_F(LoomrunTest, TimeoutKillsNodesThatIgnoreSigterm) {
  auto r = loomrun({"-n", "2", "--timeout", "0.5", "--kill-grace", "0.5", kProbe, "--sleep", "30",
                    "--ignore-term"},
                   {}, 20);
  EXPECT_EQ(r.status, 124) << r.err;
  EXPECT_NE(r.err.find("killing 2 nodes"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 5);
}

TEST_F(LoomrunTest, SigtermStopsNodesAndLoomrunExitsNonZero) {
  Subprocess p({kLoomrun, "-n", "2", kProbe, "--sleep", "60"}, env());
  ASSERT_TRUE(p.wait_for_stdout("allgather ok", 2, 20)) << p.out();
  pid_t n0 = probe_pid(p.out(), 0), n1 = probe_pid(p.out(), 1);
  ASSERT_GT(n0, 0);
  ASSERT_GT(n1, 0);
  p.signal(SIGTERM);
  RunResult r = p.wait(10);
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.status, 128 + SIGTERM) << r.err;
  EXPECT_NE(r.err.find("caught SIGTERM"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 10);
  // The nodes are gone (reaped by loomrun, so their pids no longer exist).
  EXPECT_NE(::kill(n0, 0), 0);
  EXPECT_NE(::kill(n1, 0), 0);
}

TEST_F(LoomrunTest, UnknownFlag) {
  expect_one_line(loomrun({"--bogus", "-n", "2", "true"}), "loomrun: unknown option '--bogus'");
}
TEST_F(LoomrunTest, ZeroNodes) {
  expect_one_line(loomrun({"-n", "0", "true"}), "loomrun: -n 0: expected");
}
TEST_F(LoomrunTest, NonNumericNodes) {
  expect_one_line(loomrun({"-n", "abc", "true"}), "loomrun: -n abc: expected");
}
TEST_F(LoomrunTest, TooManyNodes) {
  expect_one_line(loomrun({"-n", "1025", "true"}), "loomrun: -n 1025: expected");
}
TEST_F(LoomrunTest, MissingProgram) {
  expect_one_line(loomrun({"-n", "2"}), "loomrun: no program to run");
}
TEST_F(LoomrunTest, MissingNodeCount) { expect_one_line(loomrun({"true"}), "loomrun: missing -n"); }

TEST_F(LoomrunTest, NonexistentProgram) {
  auto r = loomrun({"-n", "4", "no_such_program_xyz"});
  expect_one_line(r, "loomrun: cannot run 'no_such_program_xyz': No such file or directory");
}

TEST_F(LoomrunTest, NonExecutableProgram) {
  std::string path = work_.path() + "/data.txt";
  std::ofstream(path) << "not a program\n";
  auto r = loomrun({"-n", "2", path});
  expect_one_line(r, "loomrun: cannot run '" + path + "': Permission denied");
}

TEST_F(LoomrunTest, MalformedConfigFlag) {
  auto r = loomrun({"-n", "2", "--heartbeat-ms", "abc", "true"});
  expect_one_line(r, "loomrun: --heartbeat-ms=abc: expected an integer");
  auto range = loomrun({"-n", "2", "--spin-us=-5", "true"});
  expect_one_line(range, "loomrun: --spin-us=-5: expected a value from 0 to 1000000");
  auto boolean = loomrun({"-n", "2", "--trace", "maybe", "true"});
  expect_one_line(boolean, "loomrun: --trace=maybe: expected a boolean");
}

TEST_F(LoomrunTest, MalformedEnvironmentValue) {
  auto r = loomrun({"-n", "2", "true"}, {"LOOM_MAX_INFLIGHT_BYTES=abc"});
  expect_one_line(r, "loomrun: LOOM_MAX_INFLIGHT_BYTES=abc: expected a size like 64K or 32M");
  // A flag overrides (and so excuses) the environment.
  auto fixed =
      loomrun({"-n", "1", "--max-inflight-bytes", "1M", "true"}, {"LOOM_MAX_INFLIGHT_BYTES=abc"});
  EXPECT_EQ(fixed.status, 0) << fixed.err;
}

TEST_F(LoomrunTest, MalformedTimeouts) {
  expect_one_line(loomrun({"-n", "1", "--timeout", "0", "true"}), "loomrun: --timeout=0: expected");
  expect_one_line(loomrun({"-n", "1", "--kill-grace", "x", "true"}),
                  "loomrun: --kill-grace=x: expected");
}

TEST_F(LoomrunTest, HelpConfigListsTheTable) {
  auto r = loomrun({"--help-config"});
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("LOOM_SPIN_US"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("--spin-us"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("LOOM_BOOT_ADDR"), std::string::npos) << "internal rows are not listed";
  auto help = loomrun({"--help"});
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("--tag-output"), std::string::npos);
  EXPECT_NE(help.out.find("--heartbeat-ms"), std::string::npos);
}

TEST_F(LoomrunTest, WrongTokenIsRefused) {
  auto r = loomrun({"-n", "2", kProbe, "--rank", "1", "--bad-token"}, {}, 20);
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.out.find("rank 1: bootstrap: refused: loomrun refused node 1: wrong job token"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.err.find("loomrun: warning: refused a bootstrap connection from pid"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("(rank 1): wrong job token"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("loomrun: node 1 (pid"), std::string::npos) << r.err;
}

// Talks to loomrun's socket directly: HELLO, then the answer.
bw::Frame hello(const std::string& addr, const std::string& token, uint32_t rank) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::strcpy(sa.sun_path, addr.c_str());
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0) << addr;
  std::string h = bw::encode(bw::Hello{token, rank, 1, 0});
  EXPECT_EQ(::send(fd, h.data(), h.size(), MSG_NOSIGNAL), static_cast<ssize_t>(h.size()));
  bw::FrameReader reader;
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  while (true) {
    auto f = reader.next();
    if (!f.is_ok() || f->has_value()) {
      ::close(fd);
      return f.is_ok() ? **f : bw::Frame{};
    }
    char buf[1024];
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      ::close(fd);
      ADD_FAILURE() << "no answer to HELLO";
      return {};
    }
    reader.append(std::string_view(buf, static_cast<size_t>(n)));
  }
}

TEST_F(LoomrunTest, ManualConnectionsAreRefusedWithReasons) {
  std::string go = work_.path() + "/go";
  Subprocess p(
      {kLoomrun, "-n", "1", "sh", "-c",
       "echo addr=$LOOM_BOOT_ADDR token=$LOOM_JOB_TOKEN; exec " + kProbe + " --wait-file " + go},
      env());
  ASSERT_TRUE(p.wait_for_stdout("allgather ok", 1, 20)) << p.out();
  std::smatch m;
  std::string out = p.out();
  ASSERT_TRUE(std::regex_search(out, m, std::regex("addr=(\\S+) token=(\\S+)"))) << out;
  std::string addr = m[1], token = m[2];

  auto expect_refused = [&](const std::string& tok, uint32_t rank, const std::string& reason) {
    bw::Frame f = hello(addr, tok, rank);
    bw::Refuse refuse;
    ASSERT_TRUE(bw::decode(f, &refuse).is_ok()) << bw::kind_name(static_cast<uint16_t>(f.kind));
    EXPECT_NE(refuse.reason.find(reason), std::string::npos) << refuse.reason;
  };
  expect_refused("not-the-token", 0, "wrong job token");
  expect_refused(token, 0, "rank 0 is already connected");
  expect_refused(token, 5, "rank 5 is out of range (the job has 1 nodes)");

  std::ofstream(go) << "go\n";
  RunResult r = p.wait(20);
  EXPECT_EQ(r.status, 0) << r.err;  // refusals do not fail the job
  EXPECT_EQ(count(r.err, "loomrun: warning: refused a bootstrap connection"), 3) << r.err;
}

TEST_F(LoomrunTest, StatsJsonMergesNodeFiles) {
  std::string file = work_.path() + "/stats.json";
  auto r = loomrun({"-n", "3", "--stats-json", file, kProbe, "--stats"});
  EXPECT_EQ(r.status, 0) << r.err;
  std::ifstream in(file);
  ASSERT_TRUE(in) << "no " << file;
  auto j = nlohmann::json::parse(in);
  ASSERT_TRUE(j["nodes"].is_array());
  ASSERT_EQ(j["nodes"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(j["nodes"][i]["rank"], i);
    EXPECT_EQ(j["nodes"][i]["messages"], 10 * i);
  }
}

TEST_F(LoomrunTest, StatsJsonMissingNodeFileIsNull) {
  std::string file = work_.path() + "/stats.json";
  auto r = loomrun({"-n", "3", "--stats-json", file, kProbe, "--stats", "--skip-stats-rank", "1"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("loomrun: warning: node 1 wrote no statistics"), std::string::npos) << r.err;
  std::ifstream in(file);
  auto j = nlohmann::json::parse(in);
  ASSERT_EQ(j["nodes"].size(), 3u);
  EXPECT_EQ(j["nodes"][0]["rank"], 0);
  EXPECT_TRUE(j["nodes"][1].is_null());
  EXPECT_EQ(j["nodes"][2]["rank"], 2);
}

// stdin goes to one node (rank 0 unless --stdin says otherwise), as with mpirun; the others read
// /dev/null. A file is handed over as it is.
TEST_F(LoomrunTest, StdinGoesToRankZeroOnly) {
  std::string input = work_.path() + "/input";
  std::ofstream(input) << "hello\nworld\n";
  const std::string node = "read x || x=EOF; read y || y=EOF; echo $LOOM_RANK:$x:$y";
  auto r = run({"/bin/sh", "-c", kLoomrun + " -n 3 sh -c '" + node + "' < " + input}, env());
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(count(r.out, "0:hello:world\n"), 1) << r.out;
  EXPECT_EQ(count(r.out, "1:EOF:EOF\n"), 1) << r.out;
  EXPECT_EQ(count(r.out, "2:EOF:EOF\n"), 1) << r.out;

  auto two =
      run({"/bin/sh", "-c", kLoomrun + " -n 3 --stdin 2 sh -c '" + node + "' < " + input}, env());
  EXPECT_EQ(count(two.out, "0:EOF:EOF\n"), 1) << two.out;
  EXPECT_EQ(count(two.out, "2:hello:world\n"), 1) << two.out;

  auto none = run(
      {"/bin/sh", "-c", kLoomrun + " -n 2 --stdin none sh -c '" + node + "' < " + input}, env());
  EXPECT_EQ(count(none.out, ":EOF:EOF\n"), 2) << none.out;
}

// From a terminal, loomrun copies its stdin into a pipe (a node reading the terminal itself
// would be stopped: it is not in the foreground process group). script(1) provides the terminal.
TEST_F(LoomrunTest, StdinFromATerminalIsRelayed) {
  if (::access("/usr/bin/script", X_OK) != 0) GTEST_SKIP() << "no script(1)";
  // note: \$ because the command passes through one more shell inside double quotes.
  const std::string node =
      "read x || x=EOF; test -t 0 && t=tty || t=pipe; echo \\$LOOM_RANK:\\$x:\\$t";
  auto r = run({"/bin/sh", "-c",
                "printf 'hello\\n' | /usr/bin/script -qec \"" + kLoomrun + " -n 2 sh -c '" + node +
                    "'\" /dev/null"},
               env({"PATH=/usr/bin:/bin", "SHELL=/bin/sh"}));
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(count(r.out, "0:hello:pipe"), 1) << r.out;
  EXPECT_EQ(count(r.out, "1:EOF:pipe"), 1) << r.out;
}

TEST_F(LoomrunTest, MalformedStdinRank) {
  expect_one_line(loomrun({"-n", "2", "--stdin", "2", "true"}), "loomrun: --stdin=2: expected");
  expect_one_line(loomrun({"-n", "2", "--stdin", "x", "true"}), "loomrun: --stdin=x: expected");
}

// The CPUs in a list like "0-3,8" (/proc/<pid>/status's Cpus_allowed_list).
std::set<int> parse_cpu_list(const std::string& text) {
  std::set<int> cpus;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t dash = item.find('-');
    int first = std::stoi(item.substr(0, dash));
    int last = dash == std::string::npos ? first : std::stoi(item.substr(dash + 1));
    for (int c = first; c <= last; ++c) cpus.insert(c);
  }
  return cpus;
}

// Each node's allowed CPUs, by rank, from a job that runs `grep Cpus_allowed_list` with
// --tag-output ("[r] Cpus_allowed_list:\t0-1").
std::map<int, std::set<int>> cpus_by_rank(const std::string& out) {
  std::map<int, std::set<int>> by_rank;
  std::regex re(R"(\[(\d+)\] Cpus_allowed_list:\s*(\S+))");
  for (const std::string& line : lines(out)) {
    std::smatch m;
    if (std::regex_search(line, m, re)) by_rank[std::stoi(m[1])] = parse_cpu_list(m[2]);
  }
  return by_rank;
}

std::set<int> own_cpus() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("Cpus_allowed_list:", 0) == 0) {
      std::stringstream ls(line.substr(18));
      std::string list;
      ls >> list;
      return parse_cpu_list(list);
    }
  return {};
}

// --bind auto (the default): with no more nodes than CPUs, node r runs on the r-th of equal
// contiguous shares of loomrun's CPUs, as mpirun binds ranks; so a node's threads share its
// CPUs instead of being spread over the others' by the scheduler.
TEST_F(LoomrunTest, EachNodeGetsItsShareOfTheCpus) {
  const std::set<int> all = own_cpus();
  if (all.size() < 2) GTEST_SKIP() << "needs 2 CPUs, this process may use " << all.size();
  const std::vector<int> cpus(all.begin(), all.end());
  const std::vector<std::string> cmd = {"--tag-output", "--", "grep", "Cpus_allowed_list",
                                        "/proc/self/status"};
  std::vector<std::string> args = {"-n", "2"};
  args.insert(args.end(), cmd.begin(), cmd.end());
  auto r = loomrun(args);
  ASSERT_EQ(r.status, 0) << r.err;
  auto by_rank = cpus_by_rank(r.out);
  ASSERT_EQ(by_rank.size(), 2u) << r.out;
  const size_t half = (cpus.size() + 1) / 2;  // the first share takes the odd CPU
  EXPECT_EQ(by_rank[0], std::set<int>(cpus.begin(), cpus.begin() + half)) << r.out;
  EXPECT_EQ(by_rank[1], std::set<int>(cpus.begin() + half, cpus.end())) << r.out;

  // --bind none, and a job of more nodes than CPUs: every node may use every CPU.
  args = {"-n", "2", "--bind", "none"};
  args.insert(args.end(), cmd.begin(), cmd.end());
  r = loomrun(args);
  ASSERT_EQ(r.status, 0) << r.err;
  by_rank = cpus_by_rank(r.out);
  ASSERT_EQ(by_rank.size(), 2u) << r.out;
  for (const auto& [rank, set] : by_rank) EXPECT_EQ(set, all) << "node " << rank;
  args = {"-n", std::to_string(cpus.size() + 1)};
  args.insert(args.end(), cmd.begin(), cmd.end());
  r = loomrun(args);
  ASSERT_EQ(r.status, 0) << r.err;
  by_rank = cpus_by_rank(r.out);
  ASSERT_EQ(by_rank.size(), cpus.size() + 1) << r.out;
  for (const auto& [rank, set] : by_rank) EXPECT_EQ(set, all) << "node " << rank;
}

TEST_F(LoomrunTest, MalformedBind) {
  expect_one_line(loomrun({"-n", "2", "--bind", "core", "true"}),
                  "loomrun: --bind=core: expected auto or none");
}

// A job stopped by --timeout still writes --stats-json, marked partial, with the reason.
TEST_F(LoomrunTest, StatsJsonOfAStoppedJobIsMarkedPartial) {
  std::string file = work_.path() + "/stats.json";
  auto r = loomrun({"-n", "2", "--timeout", "1", "--stats-json", file, "sleep", "30"});
  EXPECT_EQ(r.status, 124) << r.err;
  std::ifstream in(file);
  ASSERT_TRUE(in) << "no " << file;
  auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["partial"], true);
  EXPECT_EQ(j["stopped"], "timeout after 1 s");
  ASSERT_EQ(j["nodes"].size(), 2u);
  EXPECT_TRUE(j["nodes"][0].is_null());  // sleep writes no statistics
}

}  // namespace
}  // namespace loom::testing

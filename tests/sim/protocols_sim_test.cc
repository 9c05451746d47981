// The owner-based protocols (sc_mrsw, erc_sw) in the simulator: programs that are only correct
// under sequential consistency, run under many schedules with messages delivered in any order.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <memory>

#include "sim/checker.h"
#include "sim/sim.h"

namespace loom::sim {
namespace {

struct PetersonRun {
  Status status;  // the simulation's own verdict (a step limit means a thread spun forever)
  bool both_inside = false;  // mutual exclusion broken
  bool lost = false;         // an increment lost
};

// Peterson's mutual exclusion between node 0 and node 1 on memory of `protocol`: no Loom lock.
// Each side increments a plain counter `rounds` times inside its critical section; under
// sequential consistency none is lost and the two are never inside at once.
PetersonRun peterson(const char* protocol, uint64_t seed, int rounds) {
  Options o;
  o.nodes = 2;
  o.seed = seed;
  o.max_steps = 200'000;
  auto result = std::make_shared<PetersonRun>();
  Simulation sim(o);
  auto base = std::make_shared<uint64_t>(0);
  constexpr uint64_t kFlag = 0, kTurn = 16, kCounter = 24, kInside = 32;
  auto body = [base, rounds, protocol, result](Thread& t) {
    const uint64_t i = t.node(), j = 1 - i;
    if (i == 0) *base = t.alloc(4096, memory::Placement::kNode, 0, protocol);
    t.barrier(barrier_id(0), 2);
    const uint64_t b = *base;
    for (int r = 0; r < rounds; ++r) {
      t.write(b + kFlag + 8 * i, 1);
      t.write(b + kTurn, j);
      while (t.read(b + kFlag + 8 * j) == 1 && t.read(b + kTurn) == j) {
      }
      if (t.read(b + kInside) != 0) result->both_inside = true;
      t.write(b + kInside, 1);
      t.write(b + kCounter, t.read(b + kCounter) + 1);
      t.write(b + kInside, 0);
      t.write(b + kFlag + 8 * i, 0);
    }
    t.barrier(barrier_id(0), 2);
    if (t.read(b + kCounter) != 2u * static_cast<uint64_t>(rounds)) result->lost = true;
  };
  sim.spawn(0, body);
  sim.spawn(1, body);
  result->status = sim.run();
  return *result;
}

// Schedules tried. The sanitizer builds try a fifth of them: each is ~6x slower there, and every
// schedule runs the same code.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr uint64_t kPetersonSeeds = 60;
#else
constexpr uint64_t kPetersonSeeds = 300;
#endif

TEST(OwnerProtocolSim, PetersonUnderSequentialConsistency) {
  for (uint64_t seed = 1; seed <= kPetersonSeeds; ++seed) {
    PetersonRun r = peterson("sc_mrsw", seed, 20);
    ASSERT_TRUE(r.status.is_ok()) << "seed " << seed << ": " << r.status.to_string();
    ASSERT_FALSE(r.both_inside) << "seed " << seed << ": both in the critical section";
    ASSERT_FALSE(r.lost) << "seed " << seed << ": lost increments";
  }
}

// The negative control: on HLRC memory (release consistency, and no Loom synchronization in the
// loop) Peterson's algorithm breaks in some schedule: a thread spins on a stale flag forever, two
// are inside at once, or increments are lost.
// A failed simulation is abandoned with its threads parked (sim.h): run it in a child process,
// which exits 0 at the first broken schedule.
void find_a_broken_schedule() {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    PetersonRun r = peterson("hlrc", seed, 20);
    if (!r.status.is_ok() || r.both_inside || r.lost) {
      fprintf(stderr, "seed %llu breaks Peterson on hlrc\n", static_cast<unsigned long long>(seed));
      _exit(0);
    }
  }
  _exit(1);
}

TEST(OwnerProtocolSimDeathTest, PetersonBreaksWithoutSequentialConsistency) {
  EXPECT_EXIT(find_a_broken_schedule(), testing::ExitedWithCode(0), "breaks Peterson on hlrc");
}

}  // namespace
}  // namespace loom::sim

// What every fuzz target of tests/fuzz defines (docs/fuzz.md). Built two ways: with libFuzzer
// (LOOM_FUZZ=ON, clang), whose main calls LLVMFuzzerTestOneInput with generated inputs; and
// with replay_main.cc (every other build), which runs it once on each file of a corpus and
// writes the target's seed corpus.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

// Runs one input. Returns 0; any failure of the code under test (a crash, an abort, a
// sanitizer report, a broken oracle) ends the process.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace loom::fuzz {

// The target's seed corpus (tests/fuzz/corpus/<target>/): inputs made by Loom's own encoders,
// from which the fuzzer starts deep in the decoders.
std::vector<std::string> seeds();

// Stops the process with `what` (an oracle of the harness failed): abort(), which libFuzzer
// reports as a crash with the input that caused it.
[[noreturn]] void fail(const std::string& what);

// A target whose inputs start from state that is expensive to build (a simulation that has run
// a program): a fork server holds that state and runs each input in a fork of itself, so an
// input costs only its own work. The server is a child process forked at the first input; for
// each input it calls `prepare` (which builds, once, the state the input needs and keeps it),
// then forks, and the fork calls `run` and ends. The fork's coverage (libFuzzer's 8-bit
// counters, from zero) is copied into this process before run_forked returns, so libFuzzer sees
// what the input reached. If the fork does not end normally (a crash, an abort, a sanitizer
// report, a failed oracle: each printed by the fork) or the server ends, fails with how.
struct ForkedTarget {
  void (*prepare)(const uint8_t* data, size_t size);
  void (*run)(const uint8_t* data, size_t size);
};
void run_forked(const ForkedTarget& target, const uint8_t* data, size_t size);
// Starts the server now, if it is not running (run_forked starts it otherwise): from
// LLVMFuzzerInitialize, before libFuzzer allocates its tables (some 25 MB that every fork of a
// later server would copy the page tables of).
void start_fork_server(const ForkedTarget& target);

}  // namespace loom::fuzz

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

}  // namespace loom::fuzz

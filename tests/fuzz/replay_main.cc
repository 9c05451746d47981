// The stand-alone driver of a fuzz target (builds without libFuzzer; docs/fuzz.md):
//
//   fuzz_<target>_replay PATH...            runs the target once on each file (a directory: on
//                                           every file in it, in name order); status 0 if none
//                                           failed (a failure aborts)
//   fuzz_<target>_replay --write-seeds DIR  replaces DIR's seed-* files with the target's seeds
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz.h"

namespace fs = std::filesystem;

namespace {

int write_seeds(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind("seed-", 0) == 0) fs::remove(e.path());
  std::vector<std::string> seeds = loom::fuzz::seeds();
  for (size_t k = 0; k < seeds.size(); ++k) {
    char name[32];
    std::snprintf(name, sizeof name, "seed-%03zu", k);
    std::ofstream out(dir / name, std::ios::binary);
    out.write(seeds[k].data(), static_cast<std::streamsize>(seeds[k].size()));
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", (dir / name).c_str());
      return 1;
    }
  }
  std::printf("wrote %zu seeds to %s\n", seeds.size(), dir.c_str());
  return 0;
}

int run_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", p.c_str());
    return 1;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--write-seeds") == 0) return write_seeds(argv[2]);
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PATH... | --write-seeds DIR\n", argv[0]);
    return 2;
  }
  size_t runs = 0;
  for (int i = 1; i < argc; ++i) {
    fs::path p = argv[i];
    std::vector<fs::path> files;
    if (fs::is_directory(p)) {
      for (const auto& e : fs::directory_iterator(p))
        if (e.is_regular_file()) files.push_back(e.path());
      std::sort(files.begin(), files.end());
    } else {
      files.push_back(p);
    }
    for (const fs::path& f : files) {
      if (run_file(f) != 0) return 1;
      ++runs;
    }
  }
  if (runs == 0) {
    std::fprintf(stderr, "no inputs in the paths given\n");
    return 1;
  }
  std::printf("ran %zu inputs\n", runs);
  return 0;
}

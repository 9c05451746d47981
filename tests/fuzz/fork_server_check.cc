// A throwaway target for the fork server itself (fuzz.h, run_forked): each input's first byte
// says what its fork does, and tests/fuzz/CMakeLists.txt checks how run_forked reports it.
//   o  nothing: the input passes
//   s  dies of SIGSEGV          a  fails an oracle (abort)
//   m  touches 2.2 GiB and ends normally (past the forks' 2 GiB limit)
//   k  kills the fork server    w  writes the server's state   r  fails if it sees that write
// The server's state is an int that prepare() sets to 1 once: a fork's write to it must not
// reach the next input's fork.
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "fuzz.h"

namespace {

int state = 0;  // the server's, set by prepare()

void prepare(const uint8_t*, size_t) { state = 1; }

void run(const uint8_t* data, size_t size) {
  if (state != 1) loom::fuzz::fail("the fork did not start from the server's state");
  switch (size == 0 ? 'o' : data[0]) {
    case 's':
      raise(SIGSEGV);
      break;
    case 'a':
      loom::fuzz::fail("the fork's oracle");
    case 'm': {
      const size_t bytes = size_t{2252} << 20;  // 2.2 GiB
      // note: through a volatile pointer, or the compiler drops the allocation altogether
      volatile char* p = static_cast<char*>(std::malloc(bytes));
      if (p == nullptr) loom::fuzz::fail("cannot allocate");
      for (size_t k = 0; k < bytes; k += 4096) p[k] = 1;
      std::free(const_cast<char*>(p));
      break;
    }
    case 'k':
      kill(getppid(), SIGKILL);
      pause();  // ends with the server (PR_SET_PDEATHSIG)
      break;
    case 'w':
      state = 2;
      break;
    case 'r':
      if (state != 1) loom::fuzz::fail("an earlier fork's write reached this one");
      break;
    default:
      break;
  }
}

const loom::fuzz::ForkedTarget kTarget{prepare, run};

}  // namespace

std::vector<std::string> loom::fuzz::seeds() { return {}; }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::fuzz::run_forked(kTarget, data, size);
  return 0;
}

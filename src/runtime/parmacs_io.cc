// System calls that write into the caller's memory fail with EFAULT, instead of faulting, when
// that memory is a shared page the node cannot access (or not write) at that moment. Programs
// read input files straight into G_MALLOC memory, so libloom_parmacs.so interposes the usual ways
// of doing that: when the destination is shared memory, the data goes through a private bounce
// buffer and is then copied in by an ordinary memcpy, whose faults the protocol handles.
// (Making the pages writable first is not enough: another thread's release may write-protect
// them again before the system call runs.)
//
// Interposed: read, pread, recv, fread, fgets.
#include <dlfcn.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "memory/frames.h"
#include "runtime/parmacs.h"

namespace {

using loom::memory::kPageBytes;

template <typename F>
F real(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

bool shared(const void* p) {
  const loom::memory::PageFrames* f = loom::runtime::parmacs_io_frames();
  return f != nullptr && f->contains(p);
}

constexpr size_t kBounce = size_t{4} << 20;  // bytes per system call through the bounce buffer

// True if any page of [buf, buf+len) is shared memory.
bool touches_shared(const void* buf, size_t len) {
  if (len == 0 || loom::runtime::parmacs_io_frames() == nullptr) return false;
  auto start = reinterpret_cast<uintptr_t>(buf);
  for (uintptr_t a = start; a < start + len; a = (a & ~(kPageBytes - 1)) + kPageBytes)
    if (shared(reinterpret_cast<const void*>(a))) return true;
  return false;
}

// Runs `call(bounce, n)` for at most n = min(len, kBounce) bytes into a private buffer, then
// copies what it produced (its return value, if positive) to `dst`.
template <typename Call>
ssize_t through_bounce(void* dst, size_t len, Call call) {
  size_t n = std::min(len, kBounce);
  std::vector<char> bounce(n);
  ssize_t got = call(bounce.data(), n);
  if (got > 0) std::memcpy(dst, bounce.data(), static_cast<size_t>(got));
  return got;
}

}  // namespace

extern "C" {

ssize_t read(int fd, void* buf, size_t count) {
  static auto fn = real<ssize_t (*)(int, void*, size_t)>("read");
  if (!touches_shared(buf, count)) return fn(fd, buf, count);
  return through_bounce(buf, count, [&](char* b, size_t n) { return fn(fd, b, n); });
}

ssize_t pread(int fd, void* buf, size_t count, off_t offset) {
  static auto fn = real<ssize_t (*)(int, void*, size_t, off_t)>("pread");
  if (!touches_shared(buf, count)) return fn(fd, buf, count, offset);
  return through_bounce(buf, count, [&](char* b, size_t n) { return fn(fd, b, n, offset); });
}

ssize_t recv(int fd, void* buf, size_t len, int flags) {
  static auto fn = real<ssize_t (*)(int, void*, size_t, int)>("recv");
  if (!touches_shared(buf, len)) return fn(fd, buf, len, flags);
  return through_bounce(buf, len, [&](char* b, size_t n) { return fn(fd, b, n, flags); });
}

// note: stdio reads large requests straight into the caller's buffer with its internal read,
// which cannot be interposed; so the whole fread goes through the bounce buffer, in pieces.
size_t fread(void* ptr, size_t size, size_t n, FILE* f) {
  static auto fn = real<size_t (*)(void*, size_t, size_t, FILE*)>("fread");
  if (size == 0 || n == 0 || !touches_shared(ptr, size * n)) return fn(ptr, size, n, f);
  size_t per = std::max<size_t>(1, kBounce / size), done = 0;
  std::vector<char> bounce(std::min(n, per) * size);
  while (done < n) {
    size_t want = std::min(n - done, per);
    size_t got = fn(bounce.data(), size, want, f);
    std::memcpy(static_cast<char*>(ptr) + done * size, bounce.data(), got * size);
    done += got;
    if (got < want) break;
  }
  return done;
}

char* fgets(char* s, int size, FILE* f) {
  static auto fn = real<char* (*)(char*, int, FILE*)>("fgets");
  if (size <= 0 || !touches_shared(s, static_cast<size_t>(size))) return fn(s, size, f);
  std::vector<char> bounce(static_cast<size_t>(size));
  if (fn(bounce.data(), size, f) == nullptr) return nullptr;
  std::memcpy(s, bounce.data(), std::strlen(bounce.data()) + 1);
  return s;
}

}  // extern "C"

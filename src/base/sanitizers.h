// Which sanitizer this translation unit is built with: GCC defines __SANITIZE_ADDRESS__ and
// __SANITIZE_THREAD__, clang answers __has_feature. Each macro is 0 or 1.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define LOOM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LOOM_ASAN 1
#endif
#endif
#ifndef LOOM_ASAN
#define LOOM_ASAN 0
#endif

#if defined(__SANITIZE_THREAD__)
#define LOOM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define LOOM_TSAN 1
#endif
#endif
#ifndef LOOM_TSAN
#define LOOM_TSAN 0
#endif

// SimGrid keeps one engine per process, so a test that simulates more than once runs each
// simulation in a child process and reads its (trivially copyable) result from a pipe.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <type_traits>

namespace tessel::test {

// compute() in a forked child; `failed` when the child threw, died or wrote nothing.
template <class T, class Compute>
T in_child(Compute compute, T failed) {
  static_assert(std::is_trivially_copyable_v<T>);
  int fds[2];
  if (pipe(fds) != 0) return failed;
  const pid_t child = fork();
  if (child == 0) {
    close(fds[0]);
    T value = failed;
    try {
      value = compute();
    } catch (...) {
    }
    const bool written = write(fds[1], &value, sizeof value) == sizeof value;
    _exit(written ? 0 : 1);
  }
  close(fds[1]);
  T value = failed;
  if (read(fds[0], &value, sizeof value) != sizeof value) value = failed;
  close(fds[0]);
  waitpid(child, nullptr, 0);
  return value;
}

}  // namespace tessel::test

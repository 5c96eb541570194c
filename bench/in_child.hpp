#pragma once
// Running one measurement in a forked child, so that its peak resident memory (and nothing
// the benchmark process held before) is what wait4 reports: the child computes a trivially
// copyable result and sends it back through a pipe.

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <optional>
#include <type_traits>

namespace hexi::bench {

template <class T>
struct ChildRun {
  T value;
  double peak_MiB = 0;  // the child's peak resident set
};

// `work()` in a forked child; nullopt when the pipe or the child failed.
template <class F>
auto run_in_child(F work) -> std::optional<ChildRun<decltype(work())>> {
  using T = decltype(work());
  static_assert(std::is_trivially_copyable_v<T>, "the result crosses a pipe as bytes");
  int fds[2];
  if (pipe(fds) != 0) return std::nullopt;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    const T value = work();
    if (write(fds[1], &value, sizeof value) != static_cast<ssize_t>(sizeof value)) _exit(2);
    _exit(0);
  }
  close(fds[1]);
  T value{};
  const bool got = read(fds[0], &value, sizeof value) == static_cast<ssize_t>(sizeof value);
  close(fds[0]);
  int status = 0;
  struct rusage usage {};
  wait4(pid, &status, 0, &usage);
  if (!got) return std::nullopt;
  return ChildRun<T>{value, static_cast<double>(usage.ru_maxrss) / 1024.0};  // ru_maxrss: KiB
}

}  // namespace hexi::bench

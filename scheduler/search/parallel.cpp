#include "scheduler/search/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace hexi {
inline namespace search {

void parallel_for(int threads, int n, const std::function<void(int worker, int i)>& fn) {
  const int workers = std::clamp(threads, 1, std::max(1, n));
  if (workers == 1) {
    for (int i = 0; i < n; ++i) fn(0, i);
    return;
  }
  // Threads live for one loop: searches hand out batches of candidates that each take
  // milliseconds, against tens of microseconds to start a thread.
  std::atomic<int> next{0};
  auto run = [&](int worker) {
    for (int i = next++; i < n; i = next++) fn(worker, i);
  };
  std::vector<std::thread> pool;
  for (int w = 1; w < workers; ++w) pool.emplace_back(run, w);
  run(0);
  for (auto& t : pool) t.join();
}

int default_threads(int cap) {
  const int hw = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(hw, 1, std::max(1, cap));
}

}  // namespace search
}  // namespace hexi

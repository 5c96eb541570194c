#pragma once
// A deterministic parallel loop for searches: fn(worker, i) for every i in [0, n) on
// up to `threads` threads (the caller's thread is worker 0), each worker with its own
// state (indexed by `worker`). Results must be written by index and combined by the
// caller in index order: then the outcome does not depend on the thread count or on
// which worker ran which i.

#include <functional>

namespace hexi {
inline namespace search {

void parallel_for(int threads, int n, const std::function<void(int worker, int i)>& fn);

// The default thread count of searches: the hardware's, at most `cap` (at least 1).
int default_threads(int cap = 2);

}  // namespace search
}  // namespace hexi

// SharedMap: threads inserting and finding the same keys at once each see one value per
// key, the first stored; clear() empties every shard.
#include "scheduler/search/shared_map.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace hexi {
namespace {

TEST(SharedMap, ThreadsSeeTheFirstValueStoredForEachKey) {
  SharedMap<std::vector<int>, int> map;
  constexpr int kKeys = 2000, kThreads = 4;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < kKeys; ++k) {
        const std::vector<int> key{k % 7, k, -k};
        map.insert(key, 10 * k + t);  // the thread's own value: only the first stays
        const auto found = map.find(key);
        if (!found || *found / 10 != k) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  int entries = 0;
  map.for_each([&](const std::vector<int>& key, int value) {
    ++entries;
    EXPECT_EQ(value / 10, key[1]);
  });
  EXPECT_EQ(entries, kKeys);
  // A later insert never replaces the value found.
  map.insert({0, 0, 0}, 999999);
  EXPECT_EQ(map.find({0, 0, 0}).value() / 10, 0);
  map.clear();
  EXPECT_FALSE(map.find({0, 0, 0}).has_value());
  int left = 0;
  map.for_each([&](const auto&, int) { ++left; });
  EXPECT_EQ(left, 0);
}

}  // namespace
}  // namespace hexi

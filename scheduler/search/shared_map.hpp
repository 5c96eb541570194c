#pragma once
// A map shared by the threads of a parallel search: its entries lie in shards, each behind a
// lock of its own, so that threads looking up different keys rarely wait for each other
// (behind one lock for the whole map, the threads of a search queue on it, and each wait
// costs a system call). Values are copied out: a later insert or clear() never invalidates
// what a caller holds. An entry's value must depend on its key alone (what a parallel
// search caches), so which thread stored it and when the map was cleared never matter.

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace hexi {
inline namespace search {

// A hash of a sequence of ints (the caches' keys).
struct IntsHash {
  template <typename Ints>
  std::size_t operator()(const Ints& k) const {
    std::size_t h = 0;
    for (int x : k) h = h * 1000003u + static_cast<std::size_t>(x + 3);
    return h;
  }
};

template <typename Key, typename Value, typename Hash = IntsHash>
class SharedMap {
 public:
  std::optional<Value> find(const Key& key) const {
    const Shard& s = shard(key);
    std::lock_guard lock(s.mutex);
    auto it = s.map.find(key);
    if (it == s.map.end()) return std::nullopt;
    return it->second;
  }
  // Stores `value` unless the key holds one already (then that one stays).
  void insert(Key key, Value value) {
    Shard& s = shard(key);
    std::lock_guard lock(s.mutex);
    s.map.try_emplace(std::move(key), std::move(value));
  }
  // f(key, value) for every entry, one shard locked at a time (f must not use the map).
  template <typename F>
  void for_each(F&& f) const {
    for (const Shard& s : shards_) {
      std::lock_guard lock(s.mutex);
      for (const auto& [k, v] : s.map) f(k, v);
    }
  }
  void clear() {
    for (Shard& s : shards_) {
      std::lock_guard lock(s.mutex);
      s.map.clear();
    }
  }

 private:
  static constexpr std::size_t kShards = 16;
  struct Shard {
    mutable std::mutex mutex;
    std::unordered_map<Key, Value, Hash> map;
  };
  // The hash's top bits after a multiplication by the golden ratio: its low bits pick the
  // map's buckets inside a shard.
  static std::size_t index(const Key& key) {
    const std::uint64_t h = static_cast<std::uint64_t>(Hash{}(key)) * 0x9E3779B97F4A7C15ull;
    return static_cast<std::size_t>(h >> 60) % kShards;
  }
  Shard& shard(const Key& key) { return shards_[index(key)]; }
  const Shard& shard(const Key& key) const { return shards_[index(key)]; }
  std::array<Shard, kShards> shards_;
};

}  // namespace search
}  // namespace hexi

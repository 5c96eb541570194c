#include "engine/communicator.hpp"

#include <algorithm>

#include "topologies/enum_names.hpp"

namespace hexi::engine {
namespace {

constexpr auto kDTypes = enum_names<DType>(
    {{DType::kF32, "f32"}, {DType::kF64, "f64"}, {DType::kI32, "i32"}, {DType::kBf16, "bf16"}});
constexpr auto kReduceOps =
    enum_names<ReduceOp>({{ReduceOp::kSum, "sum"}, {ReduceOp::kMax, "max"}});

}  // namespace

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kF64:
      return 8;
    case DType::kI32:
      return 4;
    case DType::kBf16:
      return 2;
  }
  return 0;
}

std::string_view to_string(DType t) {
  return kDTypes.name(t);
}

std::string_view to_string(ReduceOp op) {
  return kReduceOps.name(op);
}

Status check_members(const std::vector<int>& members, int group_size, int self) {
  if (members.empty()) return failure("subgroup: empty member list");
  std::vector<int> sorted = members;
  std::sort(sorted.begin(), sorted.end());
  if (sorted.front() < 0 || sorted.back() >= group_size) {
    return failure("subgroup: member out of range 0.." + std::to_string(group_size - 1));
  }
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    return failure("subgroup: duplicate member");
  }
  if (!std::binary_search(sorted.begin(), sorted.end(), self)) {
    return failure("subgroup: called by rank " + std::to_string(self) + ", which is not a member");
  }
  return {};
}

}  // namespace hexi::engine

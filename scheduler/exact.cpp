#include "scheduler/exact.hpp"

namespace hexi {

Result<SearchResult> run_exact(const Scenario&, const SearchOptions&) {
  return failure("exact: TODO");
}

}  // namespace hexi

#include "scheduler/baselines.hpp"

namespace hexi {

Result<SearchResult> run_flashflex(const Scenario&, const SearchOptions&) {
  return failure("flashflex: TODO");
}

}  // namespace hexi

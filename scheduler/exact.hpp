#pragma once
// Exact search (ground truth) over HexiScale's plan space (plan_space.hpp).
#include "scheduler/search.hpp"

namespace hexi {

Result<SearchResult> run_exact(const Scenario& scenario, const SearchOptions& options);

}  // namespace hexi

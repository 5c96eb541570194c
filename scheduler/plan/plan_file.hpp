#pragma once
// A plan file as the commands read it: a pipeline plan (plan.hpp), or a sequence mesh (an
// object with a "sequence" layout, sequence_layout.hpp, as `hexisim seq --out` writes it).

#include <optional>
#include <string>

#include "scheduler/plan/plan.hpp"
#include "scheduler/plan/sequence_layout.hpp"
#include "topologies/status.hpp"

namespace hexi {
inline namespace plan {

struct PlanFile {
  std::optional<Plan> plan;
  std::optional<SequenceLayout> layout;
  int num_devices() const { return plan ? plan->num_devices() : layout->num_devices(); }
};
Result<PlanFile> read_plan_file(const std::string& path);
// The same of a JSON document (errors naming `origin`).
Result<PlanFile> plan_file_from_json(const Json& doc, const std::string& origin);

}  // namespace plan
}  // namespace hexi

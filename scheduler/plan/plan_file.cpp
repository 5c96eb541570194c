#include "scheduler/plan/plan_file.hpp"

#include <utility>

#include "topologies/json_input.hpp"

namespace hexi {
inline namespace plan {

Result<PlanFile> plan_file_from_json(const Json& doc, const std::string& origin) {
  PlanFile file;
  if (doc.is_object() && doc.contains("sequence")) {
    auto layout = layout_from_json(doc["sequence"], origin);
    if (!layout) return layout.error();
    file.layout = std::move(*layout);
    return file;
  }
  auto plan = plan_from_json(doc, origin);
  if (!plan) return plan.error();
  file.plan = std::move(*plan);
  return file;
}

Result<PlanFile> read_plan_file(const std::string& path) {
  auto doc = read_json_file(path);
  if (!doc) return doc.error();
  return plan_file_from_json(*doc, path);
}

}  // namespace plan
}  // namespace hexi

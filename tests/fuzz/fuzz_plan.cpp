// libFuzzer target: plan files (plan_from_json). A loaded plan round-trips (plan_text ->
// plan_from_json -> plan_text, same bytes) and is validated against shipped scenarios;
// one valid for a tiny CPU scenario is lowered to a program, which must be consistent.

#include <vector>

#include "scenarios/scenario.hpp"
#include "scheduler/plan/plan.hpp"
#include "scheduler/program/lower.hpp"
#include "scheduler/program/program.hpp"
#include "tests/fuzz/fuzz.hpp"

namespace {

struct Target {
  hexi::Scenario scenario;
  bool lower = false;  // small enough to lower on every input
};

const std::vector<Target>& targets() {
  static const std::vector<Target> all = [] {
    using namespace hexi;
    const auto models = fuzz::must(ModelCatalog::load_shipped(), "shipped models");
    std::vector<Target> t;
    for (const char* name :
         {"tiny-llama-cpu", "tiny-llama-8l-cpu", "tiny-llama-cpu-zero1", "tiny-llama-cpu-gpipe"}) {
      t.push_back({fuzz::must(load_scenario(name, fuzz::shipped_gpus(), models), name), true});
    }
    for (const char* name : {"hexiscale-setting1-llama2-7b", "a800-2x8-llama2-7b",
                             "hexiscale-setting2-llama2-13b", "mix-128-llama2-70b"}) {
      t.push_back({fuzz::must(load_scenario(name, fuzz::shipped_gpus(), models), name), false});
    }
    return t;
  }();
  return all;
}

void lower_and_check(const hexi::Plan& plan, const hexi::Scenario& s) {
  using namespace hexi;
  LowerOptions options;
  options.scenario = s.name;
  auto program = lower_plan(plan, s.cluster, s.model, s.training, options, fuzz::kOrigin);
  if (!program) return;  // e.g. more ops than a program may hold
  auto status = validate_program(*program, "lowered from " + fuzz::kOrigin);
  if (!status)
    fuzz::fail("a lowered valid plan is not a consistent program", status.error().message);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hexi;
  const auto& scenarios = targets();
  auto json = fuzz::parse(data, size);
  if (!json) return 0;
  auto plan = plan_from_json(*json, fuzz::kOrigin);
  if (!plan) return 0;
  const std::string first = plan_text(*plan);
  auto reread = plan_from_json(fuzz::reparse(first, "a written plan is not JSON"), fuzz::kOrigin);
  fuzz::check_same_bytes(first, plan_text(fuzz::must(reread, "a written plan does not read back")),
                         "plan round trip");
  for (const Target& t : scenarios) {
    const Scenario& s = t.scenario;
    if (!validate_plan(*plan, s.cluster, s.model, s.training, fuzz::kOrigin)) continue;
    if (t.lower) lower_and_check(*plan, s);
  }
  return 0;
}

// Plan JSON and structural validation: each error names the file, the JSON path and
// what was expected.
#include "scheduler/plan/plan.hpp"

#include <gtest/gtest.h>

#include <functional>

#include "scenarios/testing.hpp"

namespace hexi {
namespace {

// Two pipelines: one of two TP-2 stages, one single TP-4 stage; batch 3 + 5 (uneven).
const char* kPlan = R"({"version": 1, "pipelines": [
  {"batch": 3, "micro_batch": 1, "stages": [{"devices": [0, 1], "layers": [0, 5]},
                                            {"devices": [2, 3], "layers": [5, 8]}]},
  {"batch": 5, "stages": [{"devices": [4, 5, 6, 7], "layers": [0, 8]}]}]})";

Result<Plan> parse(const std::string& text) {
  auto json = parse_json_text(text, "p.json");
  if (!json) return json.error();
  return plan_from_json(*json, "p.json");
}

Status validate(const std::string& text) {
  static const Scenario sc = testing::tiny_scenario();
  auto plan = parse(text);
  if (!plan) return plan.error();
  return validate_plan(*plan, sc.cluster, sc.model, sc.training, "p.json");
}

std::string edited(std::string text, const std::string& from, const std::string& to) {
  auto at = text.find(from);
  if (at == std::string::npos) throw std::runtime_error("no " + from);
  return text.replace(at, from.size(), to);
}

// Each plan text is bad input whose message contains its expected text.
void expect_errors(const std::vector<std::pair<std::string, std::string>>& cases,
                   const std::function<Status(const std::string&)>& check) {
  for (const auto& [text, expected] : cases) {
    Status st = check(text);
    ASSERT_FALSE(st.ok()) << expected;
    EXPECT_EQ(st.error().kind, ErrorKind::kBadInput);
    EXPECT_NE(st.error().message.find(expected), std::string::npos) << st.error().message;
  }
}

TEST(Plan, ParsesAndRoundTrips) {
  auto plan = parse(kPlan);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  ASSERT_EQ(plan->pipelines.size(), 2u);
  EXPECT_EQ(plan->pipelines[0].stages[1].tp(), 2);
  EXPECT_EQ(plan->pipelines[1].micro_batches(), 5);
  EXPECT_EQ(plan->num_devices(), 8);
  EXPECT_EQ(plan->scheduler, "hand");
  auto again = plan_from_json(to_json(*plan), "again");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(plan_text(*again), plan_text(*plan));
  EXPECT_TRUE(validate(kPlan).ok()) << validate(kPlan).error().message;
}

TEST(Plan, HeadSplitFractions) {
  Stage s;
  s.devices = {0, 1};
  EXPECT_DOUBLE_EQ(s.phi(1, 4), 0.5);
  s.head_split = {2, 6};
  EXPECT_DOUBLE_EQ(s.phi(0, 8), 0.25);
  EXPECT_DOUBLE_EQ(s.max_phi(8), 0.75);
}

TEST(Plan, StructuralErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {edited(kPlan, "[4, 5, 6, 7]", "[4, 5, 6, 9]"),
       "p.json: /pipelines/1/stages/0/devices/3: device 9 does not exist (cluster "
       "\"two-a100-boxes\" has devices 0..7)"},
      {edited(kPlan, "[4, 5, 6, 7]", "[4, 5, 6, 1]"),
       "p.json: /pipelines/1/stages/0/devices/3: device 1 is already used at "
       "/pipelines/0/stages/0/devices/1"},
      {edited(kPlan, "\"layers\": [5, 8]", "\"layers\": [6, 8]"),
       "p.json: /pipelines/0/stages/1/layers: layers [5, 6) are not assigned (gap before this "
       "stage)"},
      {edited(kPlan, "\"layers\": [5, 8]", "\"layers\": [4, 8]"),
       "p.json: /pipelines/0/stages/1/layers: layers [4, 5) are assigned twice (overlap with the "
       "previous stage)"},
      {edited(kPlan, "\"layers\": [0, 8]", "\"layers\": [0, 7]"),
       "p.json: /pipelines/1/stages: stages cover layers [0, 7) but tiny-llama-8l has 8 layers"},
      {edited(kPlan, "\"layers\": [5, 8]", "\"layers\": [5, 9]"),
       "p.json: /pipelines/0/stages/1/layers: layer range ends at 9 but tiny-llama-8l has 8 "
       "layers"},
      {edited(kPlan, "\"batch\": 5", "\"batch\": 6"),
       "p.json: /pipelines: batch shares sum to 9 sequences, expected the global batch 8"},
      {edited(kPlan, "[4, 5, 6, 7]", "[4, 5, 6]"),
       "p.json: /pipelines/1/stages/0/devices: TP degree 3 does not divide"},
      {edited(kPlan, "[4, 5, 6, 7]", "[4, 5, 6], \"head_split\": [2, 1, 1]"),
       "p.json: /pipelines/1/stages/0/head_split/1: expected a multiple of 2 heads (whole "
       "grouped-query KV groups), got 1"},
      {edited(kPlan, "[4, 5, 6, 7]", "[4, 5], \"head_split\": [2, 4]"),
       "p.json: /pipelines/1/stages/0/head_split: head counts sum to 6, expected 4"},
      {edited(kPlan, "\"layers\": [5, 8]", "\"layers\": [5, 4]"),
       "p.json: /pipelines/0/stages/1/layers: expected a layer range [l0, l1) with l0 <= l1, got "
       "an array [5,4]"},
      {edited(kPlan, "[2, 3], \"layers\": [5, 8]",
              "[2], \"layers\": [5, 5]}, {\"devices\": [3], \"layers\": [5, 8]"),
       "p.json: /pipelines/0/stages/1/layers: an empty layer range: only a pipeline's first stage "
       "(the embedding alone) or last stage (the head alone) may hold no layer"},
      {edited(kPlan, "\"layers\": [0, 8]", "\"layers\": [0, 0]"),
       "p.json: /pipelines/1/stages/0/layers: an empty layer range: only a pipeline's first stage "
       "(the embedding alone) or last stage (the head alone) may hold no layer"},
      {edited(kPlan, "\"batch\": 3, \"micro_batch\": 1", "\"batch\": 3, \"micro_batch\": 2"),
       "p.json: /pipelines/0/batch: expected a multiple of micro_batch (2), got 3"},
      {edited(kPlan, "\"version\": 1", "\"version\": 0"),
       "p.json: /version: expected format version 1, got 0"},
      {edited(kPlan, "\"devices\": [0, 1]", "\"devices\": []"),
       "p.json: /pipelines/0/stages/0/devices: expected a non-empty array of device ids, got an "
       "array []"},
      {edited(kPlan, "\"devices\": [0, 1]", "\"devices\": [0, -1]"),
       "p.json: /pipelines/0/stages/0/devices/1: expected an integer in [0, 2147483647], got -1"},
      {edited(kPlan, "\"micro_batch\": 1,", "\"micro_batch\": 1, \"tp\": 2,"),
       "p.json: /pipelines/0: unknown field \"tp\""},
  };
  expect_errors(cases, validate);
}

TEST(Plan, ExplicitHeadSplitIsValid) {
  std::string text = edited(kPlan, "[4, 5, 6, 7]", "[4, 5, 6], \"head_split\": [2, 0, 2]");
  EXPECT_FALSE(validate(text).ok());  // zero heads on a device: not a TP rank
  text = edited(kPlan, "[4, 5, 6, 7]", "[4, 5], \"head_split\": [2, 2]");
  EXPECT_TRUE(validate(text).ok());
}

// Expert parallelism over a TP group: whole experts per device, on a mixture of experts only,
// summing to its experts, on every TP stage or none; fractions and round trips.
TEST(Plan, ExpertSplitsOfAMixtureOfExperts) {
  Scenario sc = testing::tiny_scenario();
  sc.model.moe = {6, 2, 0};
  auto check = [&](const std::string& text) -> Status {
    auto plan = parse(text);
    if (!plan) return plan.error();
    return validate_plan(*plan, sc.cluster, sc.model, sc.training, "p.json");
  };
  std::string ep = edited(kPlan, "[0, 1], \"layers\": [0, 5]",
                          "[0, 1], \"layers\": [0, 5], \"expert_split\": [4, 2]");
  ep = edited(ep, "[2, 3], \"layers\": [5, 8]",
              "[2, 3], \"layers\": [5, 8], \"expert_split\": [3, 3]");
  ep = edited(ep, "[4, 5, 6, 7], \"layers\": [0, 8]",
              "[4, 5, 6, 7], \"layers\": [0, 8], \"expert_split\": [0, 2, 2, 2]");
  ASSERT_TRUE(check(ep).ok()) << check(ep).error().message;
  EXPECT_TRUE(check(kPlan).ok());  // no split anywhere: every expert split by columns
  auto plan = parse(ep);
  ASSERT_TRUE(plan.ok());
  EXPECT_DOUBLE_EQ(plan->pipelines[0].stages[0].expert_share(0), 4.0 / 6);
  EXPECT_DOUBLE_EQ(plan->pipelines[1].stages[0].expert_share(0), 0.0);
  EXPECT_DOUBLE_EQ(plan->pipelines[0].stages[1].expert_share(1), 0.5);
  EXPECT_DOUBLE_EQ(Stage{}.expert_share(0), -1);
  auto again = plan_from_json(to_json(*plan), "again");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->pipelines[1].stages[0].expert_split, (std::vector<int>{0, 2, 2, 2}));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {edited(ep, "[3, 3]", "[3, 2]"),
       "p.json: /pipelines/0/stages/1/expert_split: expert counts sum to 5, expected 6 (the "
       "model's routed experts)"},
      {edited(ep, ", \"expert_split\": [3, 3]", ""),
       "p.json: /pipelines/0/stages/1: expected an \"expert_split\" (another stage of the plan "
       "gives one: every TP stage then does)"},
      {edited(ep, "[3, 3]", "[6]"),
       "p.json: /pipelines/0/stages/1/expert_split: expected one expert count per device (2 "
       "entries)"},
      {edited(ep, "[3, 3]", "[7, -1]"),
       "p.json: /pipelines/0/stages/1/expert_split/1: expected an integer in [0, 2147483647], got "
       "-1"},
  };
  expect_errors(cases, check);
  // A dense model has no experts to split.
  Status dense = validate(ep);
  ASSERT_FALSE(dense.ok());
  EXPECT_NE(dense.error().message.find("/pipelines/0/stages/0/expert_split: tiny-llama-8l is not "
                                       "a mixture of experts"),
            std::string::npos)
      << dense.error().message;
}

// Two leaves without a spine: the plan's pipelines could not exchange anything, and the
// estimate used to print an infinite time with "fits: yes".
TEST(Plan, DevicesThatCannotReachEachOtherAreRefused) {
  Scenario sc = testing::tiny_scenario();
  auto split = Cluster::from_json(Json::parse(R"({"version": 1, "name": "split",
      "network": {"nic_GBps": 25, "machines_per_leaf": 1, "spine": false},
      "machines": [{"gpu": "A100", "gpus": 4, "repeat": 2}]})"),
                                  "split.json", testing::shipped_gpus());
  ASSERT_TRUE(split.ok()) << split.error().message;
  auto plan = parse(kPlan);
  ASSERT_TRUE(plan.ok());
  auto st = validate_plan(*plan, *split, sc.model, sc.training, "p.json");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message,
            "p.json: /pipelines/1/stages/0/devices/0: device 4 cannot reach device 0: cluster "
            "\"split\" has no spine between their leaves");
  // A plan inside one leaf is fine.
  auto one_leaf = parse(R"({"version": 1, "pipelines": [
    {"batch": 8, "stages": [{"devices": [0, 1], "layers": [0, 4]}, {"devices": [2, 3], "layers": [4, 8]}]}]})");
  ASSERT_TRUE(one_leaf.ok());
  EXPECT_TRUE(validate_plan(*one_leaf, *split, sc.model, sc.training, "p.json").ok());
}

// Interleaved 1F1B: pipeline 0 has two device groups ([0, 1] and [2]) with two chunks each,
// of uneven layers (group 0 holds layers 0-1 and 3-4, group 1 layer 2 and 5-7).
const char* kInterleaved = R"({"version": 1, "pipelines": [
  {"batch": 4, "micro_batch": 1, "stages": [{"devices": [0, 1], "layers": [0, 2]},
                                            {"devices": [2], "layers": [2, 3]},
                                            {"devices": [0, 1], "layers": [3, 5]},
                                            {"devices": [2], "layers": [5, 8]}]},
  {"batch": 4, "stages": [{"devices": [4, 5, 6, 7], "layers": [0, 8]}]}]})";

TEST(Plan, RepeatedDeviceGroupsAreChunksOfAnInterleavedPipeline) {
  auto plan = parse(kInterleaved);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  const Pipeline& p = plan->pipelines[0];
  EXPECT_EQ(p.groups(), 2);
  EXPECT_EQ(p.chunks(), 2);
  EXPECT_EQ(p.num_devices(), 3);
  EXPECT_EQ(plan->num_devices(), 7);
  EXPECT_EQ(plan->devices(), (std::vector<int>{0, 1, 2, 4, 5, 6, 7}));
  EXPECT_EQ(plan->pipelines[1].groups(), 1);
  EXPECT_EQ(plan->pipelines[1].chunks(), 1);
  EXPECT_TRUE(validate(kInterleaved).ok()) << validate(kInterleaved).error().message;
}

TEST(Plan, InterleavedPipelineErrors) {
  const std::string five_stages =
      edited(kInterleaved, "\"layers\": [5, 8]}]}",
             "\"layers\": [5, 7]}, {\"devices\": [0, 1], \"layers\": [7, 8]}]}");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {five_stages,
       "p.json: /pipelines/0/stages: 5 stages on 2 device groups: every group needs the same "
       "number of chunks (a multiple of 2 stages)"},
      {edited(kInterleaved, "{\"devices\": [2], \"layers\": [5, 8]}",
              "{\"devices\": [3], \"layers\": [5, 8]}"),
       "p.json: /pipelines/0/stages/3/devices: expected the devices of stage 1 (interleaved "
       "pipeline of 2 device groups"},
      {edited(kInterleaved, "{\"devices\": [0, 1], \"layers\": [3, 5]}",
              "{\"devices\": [0], \"layers\": [3, 5]}"),
       "p.json: /pipelines/0/stages/2/devices/0: device 0 is already used at "
       "/pipelines/0/stages/0/devices/0"},
      {edited(edited(kInterleaved, "\"batch\": 4, \"micro_batch\": 1",
                     "\"batch\": 3, \"micro_batch\": 1"),
              "{\"batch\": 4, \"stages\"", "{\"batch\": 5, \"stages\""),
       "p.json: /pipelines/0/batch: 3 micro-batches (batch 3 / micro_batch 1): an interleaved "
       "pipeline needs a multiple of its 2 device groups"},
      {edited(kInterleaved, "{\"devices\": [2], \"layers\": [2, 3]}",
              "{\"devices\": [0, 1], \"layers\": [2, 3]}"),
       "p.json: /pipelines/0/stages/1/devices: stages 0 and 1 run on the same devices"},
  };
  for (const auto& [text, expected] : cases) {
    Status st = validate(text);
    ASSERT_FALSE(st.ok()) << expected;
    EXPECT_EQ(st.error().kind, ErrorKind::kBadInput);
    EXPECT_NE(st.error().message.find(expected), std::string::npos) << st.error().message;
  }
  // GPipe has no interleaved order.
  Scenario sc = testing::tiny_scenario();
  sc.training.schedule = PipelineSchedule::kGPipe;
  auto plan = parse(kInterleaved);
  ASSERT_TRUE(plan.ok());
  Status st = validate_plan(*plan, sc.cluster, sc.model, sc.training, "p.json");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message,
            "p.json: /pipelines/0/stages: an interleaved pipeline (device groups repeated) runs "
            "interleaved 1F1B: needs training.schedule \"1f1b\", got \"gpipe\"");
}

// Two pipelines (DP across different layouts): a TP-2 stage then a sequence mesh of two
// groups (devices 2, 3 uneven; device 4 alone), and one TP-2 stage. 40 + 24 = 64 tokens.
const char* kMeshPlan = R"({"version": 1, "pipelines": [
  {"batch": 4, "micro_batch": 1, "stages": [
    {"devices": [0, 1], "layers": [0, 4]},
    {"layers": [4, 8], "sequence": {"groups": [
      {"devices": [2, 3], "tokens": 40, "shards": [24, 16], "heads": [2, 2]},
      {"devices": [4], "tokens": 24, "shards": [24], "heads": [4]}]}}]},
  {"batch": 4, "stages": [{"devices": [5, 6], "layers": [0, 8]}]}]})";

TEST(Plan, AStageMayBeASequenceMesh) {
  auto plan = parse(kMeshPlan);
  ASSERT_TRUE(plan.ok()) << plan.error().message;
  const Stage& mesh = plan->pipelines[0].stages[1];
  ASSERT_TRUE(mesh.mesh());
  EXPECT_EQ(mesh.devices, (std::vector<int>{2, 3, 4}));  // the mesh's, group by group
  EXPECT_TRUE(plan->has_mesh());
  EXPECT_FALSE(plan->pipelines[1].has_mesh());
  EXPECT_EQ(plan->num_devices(), 7);
  auto again = plan_from_json(to_json(*plan), "again");
  ASSERT_TRUE(again.ok()) << again.error().message;
  EXPECT_EQ(plan_text(*again), plan_text(*plan));
  EXPECT_EQ(again->pipelines[0].stages[1].sequence, mesh.sequence);
  EXPECT_TRUE(validate(kMeshPlan).ok()) << validate(kMeshPlan).error().message;
  // "devices" may be given if it lists the mesh's devices in order.
  EXPECT_TRUE(validate(edited(kMeshPlan, R"({"layers": [4, 8], "sequence")",
                              R"({"devices": [2, 3, 4], "layers": [4, 8], "sequence")"))
                  .ok());
}

TEST(Plan, MeshStageErrors) {
  const std::string stage = "/pipelines/0/stages/1";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {edited(kMeshPlan, "\"tokens\": 24, \"shards\": [24]", "\"tokens\": 26, \"shards\": [26]"),
       "p.json: " + stage +
           "/sequence/groups: the groups' tokens sum to 66; expected the sequence length S = 64"},
      {edited(kMeshPlan, "\"shards\": [24, 16]", "\"shards\": [20, 16]"),
       "p.json: " + stage +
           "/sequence/groups/0/shards: the shards of devices 2, 3 sum to 36 tokens; expected "
           "the group's 40 (tokens)"},
      {edited(kMeshPlan, "\"heads\": [2, 2]", "\"heads\": [2, 1]"),
       "p.json: " + stage + "/sequence/groups/0/heads: the heads of devices 2, 3 sum to 3"},
      {edited(kMeshPlan, "\"devices\": [4], \"tokens\"", "\"devices\": [1], \"tokens\""),
       "p.json: " + stage +
           "/sequence/groups/1/devices/0: device 1 is already used at "
           "/pipelines/0/stages/0/devices/1"},
      {edited(kMeshPlan, "[5, 6]", "[5, 3]"),
       "p.json: /pipelines/1/stages/0/devices/1: device 3 is already used at " + stage +
           "/sequence/groups/0/devices/1"},
      {edited(kMeshPlan, "\"batch\": 4, \"micro_batch\": 1", "\"batch\": 4, \"micro_batch\": 2"),
       "p.json: /pipelines/0/micro_batch: 2 sequences per micro-batch; a pipeline with a mesh "
       "stage (" +
           stage + "/sequence) runs one sequence per micro-batch: expected 1"},
      {edited(kMeshPlan, R"({"layers": [4, 8], "sequence")",
              R"({"devices": [2, 4, 3], "layers": [4, 8], "sequence")"),
       "p.json: " + stage +
           "/devices: expected the mesh's devices group by group in rank order (3 devices), or "
           "no \"devices\""},
      {edited(kMeshPlan, R"({"layers": [4, 8], "sequence")",
              R"({"head_split": [2, 2], "layers": [4, 8], "sequence")"),
       "p.json: " + stage + "/head_split: expected no head_split on a mesh stage"},
  };
  for (const auto& [text, expected] : cases) {
    Status st = validate(text);
    ASSERT_FALSE(st.ok()) << expected;
    EXPECT_EQ(st.error().kind, ErrorKind::kBadInput);
    EXPECT_NE(st.error().message.find(expected), std::string::npos) << st.error().message;
  }
}

// The boundary of kMeshPlan's pipeline 0. Over S = 64 the groups hold 40 and 24 tokens:
// group 0 front [0, 20) and back [44, 64), group 1 [20, 32) and [32, 44). Inside group 0
// device 2 (24 tokens) holds its outer 12 + 12: [0, 12) and [52, 64); device 3 [12, 20) and
// [44, 52). Forward, mesh device i gets its rows from TP rank i * 2 / 3 (0, 0, 1); back, each
// sends its rows to both TP ranks.
TEST(Plan, MeshBoundaryMessagesCarryEachDevicesRows) {
  auto plan = parse(kMeshPlan);
  ASSERT_TRUE(plan.ok());
  const Stage& tp = plan->pipelines[0].stages[0];
  const Stage& mesh = plan->pipelines[0].stages[1];
  auto text = [](const std::vector<MeshMessage>& ms) {
    std::string out;
    for (const MeshMessage& m : ms) {
      out += std::to_string(m.from) + "->" + std::to_string(m.to) + " [" +
             std::to_string(m.rows.begin) + "," + std::to_string(m.rows.end) + ") ";
    }
    return out;
  };
  EXPECT_EQ(text(mesh_boundary(tp, mesh)),
            "0->2 [0,12) 0->2 [52,64) 0->3 [12,20) 0->3 [44,52) 1->4 [20,32) 1->4 [32,44) ");
  EXPECT_EQ(text(mesh_boundary(mesh, tp)),
            "2->0 [0,12) 2->1 [0,12) 2->0 [52,64) 2->1 [52,64) 3->0 [12,20) 3->1 [12,20) "
            "3->0 [44,52) 3->1 [44,52) 4->0 [20,32) 4->1 [20,32) 4->0 [32,44) 4->1 [32,44) ");
  EXPECT_TRUE(mesh_boundary(tp, plan->pipelines[1].stages[0]).empty());
  // Mesh to mesh: a one-group mesh of devices 0, 1 (32 + 32 tokens: [0, 16) + [48, 64) and
  // [16, 32) + [32, 48)) before kMeshPlan's: each destination's rows from their holders.
  auto first = parse(R"({"version": 1, "pipelines": [{"batch": 8, "stages": [
    {"layers": [0, 4], "sequence": {"groups": [
      {"devices": [0, 1], "tokens": 64, "shards": [32, 32], "heads": [2, 2]}]}},
    {"layers": [4, 8], "sequence": {"groups": [
      {"devices": [2, 3], "tokens": 40, "shards": [24, 16], "heads": [2, 2]},
      {"devices": [4], "tokens": 24, "shards": [24], "heads": [4]}]}}]}]})");
  ASSERT_TRUE(first.ok()) << first.error().message;
  EXPECT_TRUE(validate(plan_text(*first)).ok()) << validate(plan_text(*first)).error().message;
  const auto& two = first->pipelines[0].stages;
  EXPECT_EQ(text(mesh_boundary(two[0], two[1])),
            "0->2 [0,12) 0->2 [52,64) 0->3 [12,16) 1->3 [16,20) 0->3 [48,52) 1->3 [44,48) "
            "1->4 [20,32) 1->4 [32,44) ");
}

}  // namespace
}  // namespace hexi

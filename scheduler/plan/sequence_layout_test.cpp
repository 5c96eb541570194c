// The sequence layout: JSON round trip, every bad input rejected with the file, the JSON
// path, the device and the numbers (never a crash), and memory per device.
#include "scheduler/plan/sequence_layout.hpp"

#include <gtest/gtest.h>

#include <string>

#include "scheduler/plan/sequence_testing.hpp"

namespace hexi {
namespace {

using testing::catalog_model;
using testing::long_context;
using testing::mixed_cluster;

// Two machines: 4 H100 (devices 0-3) and 4 A100 (devices 4-7).
const Cluster& two_machines() {
  static const Cluster c = mixed_cluster({{"H100-SXM", 4, 1}, {"A100-SXM-80GB", 4, 1}});
  return c;
}

// llama3-8b (32 query heads, 8 kv heads) over S = 32768: the H100 machine takes 20480
// tokens, the A100 machine 12288.
SequenceLayout good_layout() {
  SequenceLayout l;
  l.groups.push_back({{0, 1, 2, 3}, 20480, {5120, 5120, 5120, 5120}, {8, 8, 8, 8}});
  l.groups.push_back({{4, 5, 6, 7}, 12288, {4096, 2048, 4096, 2048}, {12, 4, 12, 4}});
  return l;
}

std::string error_of(const SequenceLayout& l, const TrainingConfig& t = long_context(32768)) {
  Status st = validate(l, catalog_model("llama3-8b"), t, two_machines(), "plan.json");
  if (st.ok()) return "";
  EXPECT_EQ(st.error().kind, ErrorKind::kBadInput);
  return st.error().message;
}

std::string json_error(const Json& sequence) {
  auto l = layout_from_json(sequence, "plan.json");
  if (l.ok()) return "";
  EXPECT_EQ(l.error().kind, ErrorKind::kBadInput);
  return l.error().message;
}

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

TEST(SequenceLayout, ValidLayoutPasses) {
  EXPECT_EQ(error_of(good_layout()), "");
  EXPECT_EQ(good_layout().num_devices(), 8);
  EXPECT_EQ(good_layout().devices(), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(head_offsets(good_layout().groups[1]), (std::vector<int>{0, 12, 16, 28}));
}

TEST(SequenceLayout, JsonRoundTrip) {
  SequenceLayout l = good_layout();
  l.split_kv_heads = false;
  const Json j = to_json(l);
  EXPECT_EQ(j["groups"][1]["shards"], Json({4096, 2048, 4096, 2048}));
  auto back = layout_from_json(j, "plan.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(to_json(*back), j);
  EXPECT_FALSE(back->split_kv_heads);
  // split_kv_heads is optional and defaults to true.
  Json no_flag = j;
  no_flag.erase("split_kv_heads");
  auto dflt = layout_from_json(no_flag, "plan.json");
  ASSERT_TRUE(dflt.ok()) << dflt.error().message;
  EXPECT_TRUE(dflt->split_kv_heads);
}

TEST(SequenceLayout, BadJsonNamesFileAndPath) {
  Json base = to_json(good_layout());
  Json missing = base;
  missing["groups"][1].erase("tokens");
  EXPECT_HAS(json_error(missing), "plan.json: /sequence/groups/1");
  EXPECT_HAS(json_error(missing), "tokens");
  Json wrong_type = base;
  wrong_type["groups"][0]["shards"] = "5120";
  EXPECT_HAS(json_error(wrong_type), "plan.json: /sequence/groups/0/shards");
  Json wrong_count = base;
  wrong_count["groups"][0]["heads"] = {16, 16};
  EXPECT_HAS(json_error(wrong_count),
             "/sequence/groups/0/heads: expected one entry per device (4)");
  Json negative = base;
  negative["groups"][1]["shards"][2] = -4;
  EXPECT_HAS(json_error(negative), "/sequence/groups/1/shards/2: expected an integer in [0,");
  Json fraction = base;
  fraction["groups"][1]["heads"][0] = 1.5;
  EXPECT_HAS(json_error(fraction), "/sequence/groups/1/heads/0: expected an integer");
  Json typo = base;
  typo["groups"][0]["head"] = {8};
  EXPECT_HAS(json_error(typo), "/sequence/groups/0");
  EXPECT_HAS(json_error(Json::object()), "/sequence");
  EXPECT_HAS(json_error({{"groups", Json::array()}}), "/sequence/groups");
}

TEST(SequenceLayout, AnyJsonIsAnErrorOrALayoutNeverACrash) {
  const std::vector<Json> odd = {
      nullptr,
      42,
      "sequence",
      Json::array(),
      {{"groups", nullptr}},
      {{"groups", {nullptr}}},
      {{"groups", {Json::array()}}},
      {{"groups", {{{"devices", {1e300}}}}}},
      {{"groups", {{{"devices", {-1}}, {"tokens", 2}, {"shards", {2}}, {"heads", {8}}}}}},
      {{"groups", {{{"devices", {0}}, {"tokens", "2"}, {"shards", {2}}, {"heads", {8}}}}}},
      {{"groups", {{{"devices", {0}}, {"tokens", 2}, {"shards", {{2}}}, {"heads", {8}}}}}},
      {{"groups", {{{"devices", {0}}, {"tokens", 2}, {"shards", {2}}, {"heads", {true}}}}}},
      {{"groups", {{{"devices", {0}}, {"tokens", 2}, {"shards", {2}}, {"heads", {8}}}}},
       {"split_kv_heads", 1}},
      {{"groups", {{{"devices", {0}}, {"tokens", 9e18}, {"shards", {2}}, {"heads", {8}}}}}},
  };
  for (const Json& j : odd) {
    auto l = layout_from_json(j, "plan.json");
    if (l.ok()) {
      // Syntactically fine: validate() must still answer without crashing.
      EXPECT_FALSE(
          validate(*l, catalog_model("llama3-8b"), long_context(32768), two_machines(), "plan.json")
              .ok());
    } else {
      EXPECT_HAS(l.error().message, "plan.json: /sequence");
    }
  }
}

TEST(SequenceLayout, ShardsMustSumToTheGroupsTokens) {
  SequenceLayout l = good_layout();
  l.groups[1].shards[3] = 1024;
  const std::string e = error_of(l);
  EXPECT_HAS(e, "plan.json: /sequence/groups/1/shards: ");
  EXPECT_HAS(e, "devices 4, 5, 6, 7 sum to 11264 tokens; expected the group's 12288");
}

TEST(SequenceLayout, HeadsMustSumToTheQueryHeads) {
  SequenceLayout l = good_layout();
  l.groups[0].heads = {8, 8, 8, 7};
  EXPECT_HAS(error_of(l),
             "/sequence/groups/0/heads: the heads of devices 0, 1, 2, 3 sum to 31; "
             "expected the model's 32 query heads");
  l.groups[0].heads = {8, 8, 8, 40};
  EXPECT_HAS(error_of(l), "/sequence/groups/0/heads/3: device 3 has 40 heads; expected 0..32");
}

TEST(SequenceLayout, TokensMustMatchTheSequenceAndTheMirroredLayout) {
  // The groups hold 32768 tokens but S = 28672.
  EXPECT_HAS(error_of(good_layout(), long_context(28672)),
             "/sequence/groups: the groups' tokens sum to 32768; expected the sequence length "
             "S = 28672");
  SequenceLayout odd_group = good_layout();
  odd_group.groups[0].tokens = 20481;
  EXPECT_HAS(error_of(odd_group), "/sequence/groups/0/tokens: 20481 tokens; expected an even");
  SequenceLayout odd_shard = good_layout();
  odd_shard.groups[1].shards = {4097, 2047, 4096, 2048};
  EXPECT_HAS(error_of(odd_shard),
             "/sequence/groups/1/shards/0: device 4 has 4097 tokens; expected an even number");
}

TEST(SequenceLayout, DevicesExistAndBelongToOneGroup) {
  SequenceLayout twice = good_layout();
  twice.groups[1].devices[2] = 1;
  EXPECT_HAS(error_of(twice),
             "/sequence/groups/1/devices/2: device 1 is already in "
             "/sequence/groups/0/devices/1");
  SequenceLayout missing = good_layout();
  missing.groups[1].devices[0] = 8;
  EXPECT_HAS(error_of(missing), "/sequence/groups/1/devices/0: device 8 does not exist");
  SequenceLayout empty = good_layout();
  empty.groups[0] = {};
  EXPECT_HAS(error_of(empty), "/sequence/groups/0/devices: expected at least one device");
  SequenceLayout counts = good_layout();
  counts.groups[0].shards.pop_back();
  EXPECT_HAS(error_of(counts), "/sequence/groups/0/shards: has 3 entries; expected one per device");
}

TEST(SequenceLayout, GqaGroupsStayWholeWhereTheLayoutSaysSo) {
  // llama3-8b: 4 query heads per kv head. Group 1's ranges [0,12) [12,16) [16,28) [28,32)
  // are whole GQA groups; {10, 6, 12, 4} splits [8,12) between devices 4 and 5.
  SequenceLayout l = good_layout();
  l.split_kv_heads = false;
  EXPECT_EQ(error_of(l), "");
  l.groups[1].heads = {10, 6, 12, 4};
  EXPECT_HAS(error_of(l),
             "/sequence/groups/1/heads/0: device 4 holds query heads [0, 10), which "
             "split a GQA group of 4 query heads per kv head");
  l.split_kv_heads = true;  // allowed: the kv head is replicated
  EXPECT_EQ(error_of(l), "");
}

TEST(SequenceLayout, MemoryOverTheCapNamesDeviceAndNumbers) {
  // llama2-70b (~69e9 parameters, 16 bytes each under ZeRO-1 over 8 devices: ~138 GB of
  // weights + gradients per device alone) cannot fit an 80 GB device.
  SequenceLayout l = good_layout();
  for (auto& g : l.groups) g.heads = {16, 16, 16, 16};
  Status st =
      validate(l, catalog_model("llama2-70b"), long_context(32768), two_machines(), "plan.json");
  ASSERT_FALSE(st.ok());
  EXPECT_HAS(st.error().message, "plan.json: /sequence/groups/0/devices/0: device 0 (H100-SXM");
  EXPECT_HAS(st.error().message, "95 % of its 80.00 GiB is 76.00 GiB: over by");
}

TEST(SequenceLayout, MemoryPerDeviceFollowsShardsHeadsAndTheRing) {
  const Model m = catalog_model("llama3-8b");
  const TrainingConfig t = long_context(32768);
  auto mem = layout_memory(good_layout(), m, t, two_machines());
  ASSERT_EQ(mem.size(), 8u);
  // Device 4 (4096 tokens, 12 heads) vs device 5 (2048 tokens, 4 heads), same group.
  EXPECT_EQ(mem[4].device, 4);
  EXPECT_EQ(mem[4].group, 1);
  EXPECT_DOUBLE_EQ(mem[4].mesh.activations, 2 * mem[5].mesh.activations);
  EXPECT_DOUBLE_EQ(mem[4].logits, 2 * mem[5].logits);
  // All-to-all buffers: T_g (2 h + 2 kv) d B = 12288 * (24 + 6) * 256 for device 4.
  EXPECT_DOUBLE_EQ(mem[4].mesh.ulysses_buffers, 12288.0 * 30 * 256);
  // Ring buffers by the longest group (20480 tokens): 2 blocks of K, V, dK, dV of its kv.
  EXPECT_DOUBLE_EQ(mem[0].mesh.ring_buffers, 2 * 2.0 * 20480 * 2 * 128 * (2 + 2));
  // Model states: ZeRO-1 over the 8 devices.
  EXPECT_DOUBLE_EQ(mem[0].mesh.states.optimizer, 12 * m.params() / 8);
  EXPECT_DOUBLE_EQ(mem[0].capacity, 80 * kGiB);
  EXPECT_DOUBLE_EQ(mem[0].limit(), 76 * kGiB);
}

// good_layout() with its A100 group tensor-parallel (uneven heads 12, 4, 12, 4).
SequenceLayout tensor_layout() {
  SequenceLayout l = good_layout();
  l.groups[1].tensor = true;
  return l;
}

TEST(SequenceLayout, TensorGroupsRoundTripAndAreChecked) {
  const Json j = to_json(tensor_layout());
  EXPECT_EQ(j["groups"][1]["parallel"], "tensor");
  EXPECT_FALSE(j["groups"][0].contains("parallel"));  // "ulysses", the default, left out
  auto back = layout_from_json(j, "plan.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, tensor_layout());
  EXPECT_EQ(error_of(*back), "");
  Json ulysses = j;
  ulysses["groups"][1]["parallel"] = "ulysses";
  EXPECT_EQ(*layout_from_json(ulysses, "plan.json"), good_layout());
  Json bad = j;
  bad["groups"][1]["parallel"] = "pipeline";
  EXPECT_HAS(json_error(bad), "plan.json: /sequence/groups/1/parallel: expected \"ulysses\" or");
  // Every device of a tensor group holds a head; ZeRO-3 is refused.
  SequenceLayout none = tensor_layout();
  none.groups[1].heads = {16, 0, 12, 4};
  EXPECT_HAS(error_of(none), "/sequence/groups/1/heads/1: device 5 holds no query head");
  none.groups[1].tensor = false;
  EXPECT_EQ(error_of(none), "");
  TrainingConfig z3 = long_context(32768);
  z3.zero_stage = 3;
  EXPECT_HAS(error_of(tensor_layout(), z3), "/sequence/groups/1/parallel: a tensor-parallel group");
  EXPECT_EQ(tensor_layout().holders(), 5);  // four Ulysses devices, one tensor group
  EXPECT_EQ(head_holders(tensor_layout(), 13), (std::vector<int>{0, 1, 2, 3, 5}));
}

TEST(SequenceLayout, TensorGroupMemoryIsATpRanksShare) {
  const Model m = catalog_model("llama3-8b");
  const TrainingConfig t = long_context(32768);
  const auto ulysses = layout_memory(good_layout(), m, t, two_machines());
  const auto tensor = layout_memory(tensor_layout(), m, t, two_machines());
  // Device 4 holds 12 of 32 heads: its share of the weights (norms whole), sharded over the
  // 5 holders under ZeRO-1; no all-to-all buffers; activations and logits of a TP rank
  // (phi 12/32, 4 devices) under sequence parallelism for the group's 12288 tokens.
  StageShape whole = whole_model_shape(m, 1, t.recompute);
  whole.phi = 12.0 / 32;
  const double params = stage_params(m, whole);
  EXPECT_DOUBLE_EQ(member_params(m, tensor_layout().groups[1], 0), params);
  EXPECT_DOUBLE_EQ(tensor[4].mesh.states.weights, 2 * params);
  EXPECT_DOUBLE_EQ(tensor[4].mesh.states.optimizer, 12 * params / 5);
  EXPECT_DOUBLE_EQ(tensor[4].mesh.ulysses_buffers, 0);
  TrainingConfig sp = t;
  sp.seq_len = 12288;
  sp.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(tensor[4].mesh.activations,
                   m.layers * activation_bytes_per_layer(m, sp, 1, 4, 12.0 / 32, t.recompute));
  EXPECT_DOUBLE_EQ(tensor[4].logits, 12288.0 * m.vocab * 12 / 32 * (2 + 4));
  EXPECT_LT(tensor[4].total(), ulysses[4].total());
  // The ring's buffers are a Ulysses device's with the same heads; the H100 group keeps its
  // whole weights, now sharded over 5 holders instead of 8.
  EXPECT_DOUBLE_EQ(tensor[4].mesh.ring_buffers, ulysses[4].mesh.ring_buffers);
  EXPECT_DOUBLE_EQ(tensor[0].mesh.states.optimizer, 12 * m.params() / 5);
}

}  // namespace
}  // namespace hexi

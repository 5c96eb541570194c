// The sequence schedulers (hexiseq, hexiseq-homogeneous, ring, usp) over a grid of small
// problems: mixed clusters of 2, 3, 4, 6 and 8 GPUs and every sequence length from 1 to 64 tokens
// (fewer tokens than devices, odd lengths, lengths no block divides) plus a few longer ones. Each
// answers bad input or a layout valid for the scenario, never a crash (the sanitizer build
// runs this; fuzz_seq searches the same space at random).
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "scheduler/plan/sequence_testing.hpp"
#include "scheduler/scheduler.hpp"

namespace hexi {
namespace {

using testing::MachineSpec;

struct Mesh {
  const char* name;
  std::vector<MachineSpec> machines;
};

// What a scheduler returned for `sc`: a valid layout, or why not (bad input).
void expect_layout_or_bad_input(const std::string& scheduler, const Scenario& sc,
                                const std::string& where) {
  auto r = run_scheduler(scheduler, sc, {});
  if (!r) {
    EXPECT_EQ(r.error().kind, ErrorKind::kBadInput) << where << ": " << r.error().message;
    return;
  }
  ASSERT_TRUE(r->document.layout.has_value()) << where;
  const SequenceLayout& layout = *r->document.layout;
  std::int64_t tokens = 0;
  std::set<int> devices;
  for (const SequenceGroup& g : layout.groups) {
    tokens += g.tokens;
    for (int d : g.devices) EXPECT_TRUE(devices.insert(d).second) << where << ": device " << d;
  }
  EXPECT_EQ(tokens, sc.training.seq_len) << where;
  const Status valid =
      validate_structure(layout, sc.model, sc.training, sc.cluster, where, "/sequence");
  EXPECT_TRUE(valid.ok()) << where << ": " << valid.error().message;
  EXPECT_TRUE(std::isfinite(r->iteration_time_s) && r->iteration_time_s > 0)
      << where << ": " << r->iteration_time_s;
}

TEST(SequenceGrid, SmallMixedMeshesGiveALayoutOrBadInput) {
  const std::vector<Mesh> meshes = {
      {"1 A100 + 1 H100", {{"A100-SXM-80GB", 1, 1}, {"H100-SXM", 1, 1}}},
      {"2 A100 + 2 H100", {{"A100-SXM-80GB", 2, 1}, {"H100-SXM", 2, 1}}},
      {"H100 + A100 + L40S", {{"H100-SXM", 1, 1}, {"A100-SXM-80GB", 1, 1}, {"L40S", 1, 1}}},
      {"3 A100 + 3 RTX4090", {{"A100-SXM-80GB", 3, 1}, {"RTX4090", 3, 1}}},
      {"2 x (H100, A100, L40S, RTX4090)",
       {{"H100-SXM", 2, 1}, {"A100-SXM-80GB", 2, 1}, {"L40S", 2, 1}, {"RTX4090", 1, 2}}},
  };
  std::vector<int> lengths;
  for (int s = 1; s <= 64; ++s) lengths.push_back(s);
  for (int s : {96, 130, 1000, 4096}) lengths.push_back(s);
  for (const Mesh& mesh : meshes) {
    Scenario sc;
    sc.name = mesh.name;
    sc.cluster = testing::mixed_cluster(mesh.machines);
    sc.model = testing::small_model();
    for (int seq : lengths) {
      sc.training = testing::long_context(seq);
      for (const char* scheduler : {"hexiseq", "hexiseq-homogeneous", "ring", "usp"}) {
        expect_layout_or_bad_input(
            scheduler, sc,
            std::string(scheduler) + " on " + mesh.name + ", S = " + std::to_string(seq));
      }
    }
  }
}

}  // namespace
}  // namespace hexi

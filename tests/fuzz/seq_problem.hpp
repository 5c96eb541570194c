#pragma once
// The input of fuzz_seq: bytes that decode to a small `hexisim seq` problem (a scenario with
// an inline cluster of 1-8 GPUs, a shipped model, one sequence, a scheduler and its HexiSeq
// options, their time bounded), as the scenario JSON and options JSON the loaders read. Every
// input decodes to a problem (a byte past the end reads as 0), so the fuzzer spends its time
// in the schedulers, not in syntax. seeds.cpp writes seeds with encode_seq_problem().
//
//   byte 0     scheduler: index into the fuzzed sequence schedulers (mod their count)
//   byte 1     model: index into the shipped model catalog (mod its size)
//   bytes 2-3  seq_len - 1, little endian, mod min(kMaxSeq, the model's max_seq)
//   byte 4     global batch - 1 (mod 4)
//   byte 5     network: NIC rate (bits 0-2, of kNicGBps), machines per leaf (bits 3-4, 0-2),
//              transport (bits 5-6: the cluster's default, rdma, tcp, efa)
//   byte 6     training: ZeRO stage (bits 0-1), recompute (bits 2-3: none, selective, full,
//              none), precision (bits 4-5: bf16, fp16, fp32, bf16)
//   byte 7     options: split_kv_heads (bit 0 clear), block_tokens (bits 1-3, of kBlocks),
//              rounds - 1 (bits 4-5)
//   bytes 8-   machines, 3 bytes each: GPU type (index into the shipped GPU catalog),
//              GPUs - 1 (mod 8), repeat - 1 (mod 4); at least one machine, and no more
//              once the cluster holds kMaxGpus (the last one cut down to fit)

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "scenarios/model.hpp"
#include "scheduler/scheduler.hpp"
#include "topologies/gpu_catalog.hpp"
#include "topologies/json_input.hpp"

namespace hexi::fuzz {

inline constexpr int kMaxGpus = 8;
inline constexpr int kMaxSeq = 4096;                                          // tokens
inline constexpr std::array<double, 5> kNicGBps = {1.25, 12.5, 25, 50, 400};  // GB/s
inline constexpr std::array<int, 8> kBlocks = {0, 0, 2, 4, 8, 16, 6, 3};      // 0: auto

// The schedulers fuzzed, in registry order: every sequence scheduler but hexiseq-exact (its
// whole-mesh programs take tens of seconds on 8 devices under the sanitizers).
inline const std::vector<const SchedulerInfo*>& seq_schedulers() {
  static const std::vector<const SchedulerInfo*> all = [] {
    std::vector<const SchedulerInfo*> out;
    for (const SchedulerInfo& s : schedulers()) {
      if (s.kind == SchedulerKind::kSequence && s.name != "hexiseq-exact") out.push_back(&s);
    }
    return out;
  }();
  return all;
}

struct SeqMachine {
  int gpu = 0;  // index into the GPU catalog
  int gpus = 1;
  int repeat = 1;
};

// One decoded problem (the fields of the byte layout above, already reduced to their ranges).
struct SeqProblem {
  int scheduler = 0;  // index into the fuzzed schedulers (mod their count)
  int model = 0;      // index into the model catalog
  int seq_len = 1;
  int global_batch = 1;
  int nic = 0, machines_per_leaf = 0, transport = 0;
  int zero_stage = 0, recompute = 0, precision = 0;
  bool split_kv_heads = true;
  int block = 0;  // index into kBlocks
  int rounds = 1;
  std::vector<SeqMachine> machines;
};

namespace seq_detail {

// Byte `i` of the input, 0 past its end.
inline int byte_at(const std::uint8_t* data, std::size_t size, std::size_t i) {
  return i < size ? data[i] : 0;
}

}  // namespace seq_detail

inline SeqProblem decode_seq_problem(const std::uint8_t* data, std::size_t size,
                                     const GpuCatalog& gpus, const ModelCatalog& models) {
  using seq_detail::byte_at;
  auto at = [&](std::size_t i) { return byte_at(data, size, i); };
  SeqProblem p;
  p.scheduler = at(0);
  p.model = at(1) % static_cast<int>(models.models().size());
  const int max_seq = std::max(1, std::min(kMaxSeq, models.models()[p.model].max_seq));
  p.seq_len = 1 + (at(2) | at(3) << 8) % max_seq;
  p.global_batch = 1 + at(4) % 4;
  p.nic = (at(5) & 7) % static_cast<int>(kNicGBps.size());
  p.machines_per_leaf = (at(5) >> 3 & 3) % 3;
  p.transport = at(5) >> 5 & 3;
  p.zero_stage = at(6) & 3;
  p.recompute = at(6) >> 2 & 3;
  p.precision = at(6) >> 4 & 3;
  p.split_kv_heads = (at(7) & 1) == 0;
  p.block = at(7) >> 1 & 7;
  p.rounds = 1 + (at(7) >> 4 & 3);
  int total = 0;
  for (std::size_t i = 8; total < kMaxGpus && (i < size || p.machines.empty()); i += 3) {
    SeqMachine m;
    m.gpu = at(i) % static_cast<int>(gpus.gpus().size());
    m.gpus = std::min(1 + at(i + 1) % 8, kMaxGpus - total);
    m.repeat = std::min(1 + at(i + 2) % 4, (kMaxGpus - total) / m.gpus);
    total += m.gpus * m.repeat;
    p.machines.push_back(m);
  }
  return p;
}

// The bytes that decode to `p` (indices as given; seeds.cpp).
inline std::string encode_seq_problem(const SeqProblem& p) {
  std::string out(8, '\0');
  auto put = [&](std::size_t i, int v) { out[i] = static_cast<char>(v & 0xff); };
  put(0, p.scheduler);
  put(1, p.model);
  put(2, (p.seq_len - 1) & 0xff);
  put(3, (p.seq_len - 1) >> 8);
  put(4, p.global_batch - 1);
  put(5, p.nic | p.machines_per_leaf << 3 | p.transport << 5);
  put(6, p.zero_stage | p.recompute << 2 | p.precision << 4);
  put(7, (p.split_kv_heads ? 0 : 1) | p.block << 1 | (p.rounds - 1) << 4);
  for (const SeqMachine& m : p.machines) {
    out += static_cast<char>(m.gpu);
    out += static_cast<char>(m.gpus - 1);
    out += static_cast<char>(m.repeat - 1);
  }
  return out;
}

// The scenario file of the problem, its cluster inline (what scenario_from_json reads).
inline Json seq_scenario_json(const SeqProblem& p, const GpuCatalog& gpus,
                              const ModelCatalog& models) {
  static const char* const kTransports[] = {"", "rdma", "tcp", "efa"};
  static const char* const kRecompute[] = {"none", "selective", "full", "none"};
  static const char* const kPrecision[] = {"bf16", "fp16", "fp32", "bf16"};
  Json network = {{"nic_GBps", kNicGBps[p.nic]}, {"machines_per_leaf", p.machines_per_leaf}};
  if (p.transport != 0) network["transport"] = kTransports[p.transport];
  Json machines = Json::array();
  for (const SeqMachine& m : p.machines) {
    machines.push_back({{"gpu", gpus.gpus()[m.gpu].name}, {"gpus", m.gpus}, {"repeat", m.repeat}});
  }
  return {{"version", 1},
          {"name", "fuzz-seq"},
          {"cluster",
           {{"version", 1}, {"name", "fuzz-seq"}, {"network", network}, {"machines", machines}}},
          {"model", models.models()[p.model].name},
          {"training",
           {{"global_batch", p.global_batch},
            {"micro_batch", 1},
            {"seq_len", p.seq_len},
            {"precision", kPrecision[p.precision]},
            {"zero_stage", p.zero_stage},
            {"recompute", kRecompute[p.recompute]}}},
          {"scheduler", "hexiseq"}};
}

// The scheduler's HexiSeq options (what read_hexiseq_options reads). The search's time is
// bounded for the fuzzer's 10 s per input: 0.5 s per LP or integer program and a 3 s budget
// (with the defaults, 10 s per program and no budget, one integer program of an 8-GPU
// hexiseq-homogeneous search can run to its 10 s limit).
inline Json seq_options_json(const SeqProblem& p) {
  return {{"split_kv_heads", p.split_kv_heads},
          {"block_tokens", kBlocks[p.block]},
          {"rounds", p.rounds},
          {"solver_time_limit_s", 0.5},
          {"time_budget_s", 3}};
}

}  // namespace hexi::fuzz

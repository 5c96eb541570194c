#pragma once
// Checks `hexisim train` makes on every rank while loading, before any collective work, so
// that a job that cannot finish fails in seconds with the numbers instead of after hours of
// training: a plan that does not fit in memory (output paths: topologies/paths.hpp).

#include <filesystem>
#include <span>
#include <string_view>

#include "scenarios/scenario.hpp"
#include "scheduler/program/program.hpp"

namespace hexi::engine {

// Peak memory of one device of the program as `hexisim estimate` counts it (cost_model.hpp
// device_memory: weights, gradients, AdamW state, the activations of the micro-batches
// the schedule keeps in flight, logits, the training config's reserve); a sequence mesh's
// device as the layout counts it (layout_memory: model states under its ZeRO stage over the
// mesh, its shard's activations, ring and all-to-all buffers, logits, reserve).
MemoryBreakdown device_peak_memory(const Program& program, const DeviceLayout& device,
                                   const Scenario& scenario);

// Every device of the program fits in its GPU's memory (the cluster's catalog entry);
// messages name the `plan` file.
Status check_device_memory(const Program& program, const Scenario& scenario,
                           const std::string& plan);
// cpu backend: the devices whose ranks run on this host (`local`) fit together in its
// physical memory, counted at float32 (what the cpu backend stores, bf16 runs included).
Status check_host_memory(const Program& program, const Scenario& scenario,
                         std::span<const DeviceLayout> local, const std::string& plan);

}  // namespace hexi::engine

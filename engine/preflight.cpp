#include "engine/preflight.hpp"

#include <unistd.h>

#include <algorithm>

#include "scheduler/cost/schedule.hpp"
#include "topologies/text.hpp"

namespace hexi::engine {

namespace fs = std::filesystem;

namespace {

std::string gib(double bytes) {
  return fixed(bytes / kGiB, 2) + " GiB";
}

// Pipelines of the program: the DP degree that ZeRO-1 shards optimizer state over.
int pipelines(const Program& program) {
  int n = 0;
  for (const auto& l : program.devices) n = std::max(n, l.pipeline + 1);
  return n;
}

std::string breakdown(const MemoryBreakdown& m) {
  return "weights " + fixed(m.weights / kGiB, 2) + ", gradients " + fixed(m.gradients / kGiB, 2) +
         ", optimizer " + fixed(m.optimizer / kGiB, 2) + ", activations " +
         fixed(m.activations / kGiB, 2) + ", logits " + fixed(m.logits / kGiB, 2) + ", reserve " +
         fixed(m.reserve / kGiB, 2) + " GiB";
}

// Bytes of physical memory of this host.
double host_memory_bytes() {
  return static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
}

}  // namespace

MemoryBreakdown device_peak_memory(const Program& program, const DeviceLayout& device,
                                   const Scenario& scenario) {
  if (program.sequence) {  // the mesh's own accounting (plan/sequence_layout.hpp), as `hexisim seq`
    for (const DeviceMemory& d :
         layout_memory(*program.sequence, scenario.model, scenario.training, scenario.cluster)) {
      if (d.device != device.device) continue;
      MemoryBreakdown m;
      m.weights = d.mesh.states.weights;
      m.gradients = d.mesh.states.gradients;
      m.optimizer = d.mesh.states.optimizer;
      // Ring and all-to-all buffers are activations of the attention core.
      m.activations = d.mesh.activations + d.mesh.ring_buffers + d.mesh.ulysses_buffers;
      m.logits = d.logits;
      m.reserve = d.mesh.reserve;
      return m;
    }
  }
  const int in_flight =
      in_flight_micro_batches(program.schedule, device.stage, device.stages, device.micro_batches);
  if (const SequenceLayout* mesh = program.mesh_of(device)) {  // a mesh stage of a pipeline
    return mesh_stage_memory(*mesh, device.device, scenario.model, scenario.training,
                             stage_shape(device, in_flight, pipelines(program)));
  }
  if (!device.chunks.empty()) {  // interleaved: each chunk's micro-batches at the peak
    const int chunks = num_chunks(device);
    return chunked_memory(
        scenario.model, scenario.training, device,
        interleaved_in_flight(device.stage, device.stages / chunks, chunks, device.micro_batches,
                              chunk_activation_bytes(scenario.model, scenario.training, device)),
        pipelines(program));
  }
  return device_memory(scenario.model, scenario.training,
                       stage_shape(device, in_flight, pipelines(program)));
}

Status check_device_memory(const Program& program, const Scenario& scenario,
                           const std::string& plan) {
  for (const auto& l : program.devices) {
    const MemoryBreakdown need = device_peak_memory(program, l, scenario);
    const GpuSpec& gpu = scenario.cluster.gpu(l.device);
    if (need.total() <= gpu.memory_bytes()) continue;
    return bad_input(plan + ": does not fit: device " + std::to_string(l.device) +
                     " needs an estimated " + gib(need.total()) + " (" + breakdown(need) +
                     "), its " + gpu.name + " has " + gib(gpu.memory_bytes()) +
                     " (hexisim estimate shows every device)");
  }
  return {};
}

Status check_host_memory(const Program& program, const Scenario& scenario,
                         std::span<const DeviceLayout> local, const std::string& plan) {
  // The cpu backend stores bf16 values in float32 buffers (kernels/blocks.hpp "Precision"):
  // its tensors take float32 bytes whatever the precision.
  Scenario stored = scenario;
  stored.training.precision = "fp32";
  double need = 0;
  for (const auto& l : local) need += device_peak_memory(program, l, stored).total();
  const double have = host_memory_bytes();
  if (need <= have) return {};
  return bad_input(plan + ": does not fit: the " + std::to_string(local.size()) +
                   " ranks on this host need an estimated " + gib(need) +
                   " together, its physical memory is " + gib(have));
}

}  // namespace hexi::engine

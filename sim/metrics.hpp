#pragma once
// sim/ internal: the report (metrics) and the Chrome trace of an executed program.

#include <string>
#include <vector>

#include "sim/executor.hpp"
#include "sim/simulator.hpp"

namespace hexi::sim {

struct RunInputs {
  const Program& program;
  const Cluster& cluster;
  const Model& model;
  const TrainingConfig& training;
  const std::vector<double>& duration;  // per op, compute seconds incl. folded collectives
  const std::vector<double>& folded;    // per op, the folded-collective part of duration
  const std::vector<LinkInfo>& links;
  Platform* platform;  // routes of flows (trace link tracks)
};

SimReport make_report(const RunInputs& in, const ExecutionResult& r);

// Chrome trace events: a process per device (threads: compute, p2p, gather, dp;
// op ids in args), and a "links" process with one counter track per link that
// carried traffic (flows in flight). Times in microseconds, fixed formatting.
std::string make_trace(const RunInputs& in, const ExecutionResult& r);

}  // namespace hexi::sim

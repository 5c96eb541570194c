// SimReport <-> JSON (report.json; also the transport from the simulating child).

#include "sim/simulator.hpp"

namespace hexi {

Json SimReport::to_json() const {
  Json devs = Json::array();
  for (const auto& d : devices) {
    Json dj = {{"device", d.device},
               {"gpu", d.gpu},
               {"pipeline", d.pipeline},
               {"stage", d.stage},
               {"tp_rank", d.tp_rank},
               {"busy_s", d.busy_s},
               {"exposed_comm_s", d.exposed_comm_s},
               {"dp_wait_s", d.dp_wait_s},
               {"bubble_s", d.bubble_s},
               {"idle_s", d.idle_s},
               {"finish_s", d.finish_s},
               {"max_in_flight", d.max_in_flight},
               {"peak_memory_gib", d.peak_memory_bytes / kGiB},
               {"capacity_gib", d.capacity_bytes / kGiB},
               {"memory", d.memory}};
    if (d.sequence_group >= 0) {
      dj["sequence_group"] = d.sequence_group;
      dj["ulysses_wait_s"] = d.ulysses_wait_s;
      dj["ring_wait_s"] = d.ring_wait_s;
    }
    devs.push_back(std::move(dj));
  }
  Json ls = Json::array();
  for (const auto& l : links) {
    ls.push_back({{"name", l.name},
                  {"kind", l.kind},
                  {"bandwidth_GBps", l.bandwidth_Bps / 1e9},
                  {"bytes", l.bytes},
                  {"utilisation", l.utilisation}});
  }
  Json j = {{"version", 1},
            {"scenario", scenario},
            {"cluster", cluster},
            {"model", model},
            {"fidelity", fidelity},
            {"schedule", schedule},
            {"all_reduce", algorithm},
            {"devices_used", devices_used},
            {"ops", ops},
            {"iteration_time_s", iteration_time_s},
            {"tokens_per_s", tokens_per_s},
            {"achieved_pflops", achieved_pflops},
            {"mfu", mfu},
            {"pipeline_s", pipeline_s},
            {"activities", activities},
            {"comms", comms},
            {"timers", timers},
            {"analytic_batches", analytic_batches},
            {"materialised", materialised},
            {"feasible", feasible},
            {"problems", problems},
            {"devices", devs},
            {"links", ls}};
  if (replicas.pipelines > 0) {
    j["replicas"] = {{"pipelines", replicas.pipelines}, {"simulated", replicas.simulated}};
    if (!replicas.why_not.empty()) j["replicas"]["not_folded"] = replicas.why_not;
  }
  if (!plan.empty()) j["plan"] = plan;
  if (!plan_digest.empty()) j["plan_digest"] = plan_digest;
  figures.add_to(j);
  return j;
}

Result<SimReport> SimReport::from_json(const Json& j) {
  try {
    SimReport r;
    r.scenario = j.at("scenario").get<std::string>();
    r.cluster = j.at("cluster").get<std::string>();
    r.model = j.at("model").get<std::string>();
    r.fidelity = j.at("fidelity").get<std::string>();
    r.schedule = j.at("schedule").get<std::string>();
    r.algorithm = j.at("all_reduce").get<std::string>();
    r.plan = j.value("plan", std::string());
    r.plan_digest = j.value("plan_digest", std::string());
    r.devices_used = j.at("devices_used").get<int>();
    r.ops = j.at("ops").get<int>();
    r.iteration_time_s = j.at("iteration_time_s").get<double>();
    r.tokens_per_s = j.at("tokens_per_s").get<double>();
    r.achieved_pflops = j.at("achieved_pflops").get<double>();
    r.mfu = j.at("mfu").get<double>();
    r.figures = FlopFigures::from_json(j);
    r.pipeline_s = j.at("pipeline_s").get<double>();
    r.activities = j.at("activities").get<std::int64_t>();
    r.comms = j.at("comms").get<std::int64_t>();
    r.timers = j.at("timers").get<std::int64_t>();
    r.analytic_batches = j.at("analytic_batches").get<std::int64_t>();
    r.materialised = j.at("materialised").get<std::int64_t>();
    r.feasible = j.at("feasible").get<bool>();
    r.problems = j.at("problems").get<std::vector<std::string>>();
    if (j.contains("replicas")) {
      const Json& f = j.at("replicas");
      r.replicas.pipelines = f.at("pipelines").get<int>();
      r.replicas.simulated = f.at("simulated").get<int>();
      r.replicas.why_not = f.value("not_folded", std::string());
    }
    for (const auto& d : j.at("devices")) {
      DeviceMetrics m;
      m.device = d.at("device").get<int>();
      m.gpu = d.at("gpu").get<std::string>();
      m.pipeline = d.at("pipeline").get<int>();
      m.stage = d.at("stage").get<int>();
      m.tp_rank = d.at("tp_rank").get<int>();
      m.busy_s = d.at("busy_s").get<double>();
      m.exposed_comm_s = d.at("exposed_comm_s").get<double>();
      m.dp_wait_s = d.at("dp_wait_s").get<double>();
      m.bubble_s = d.at("bubble_s").get<double>();
      m.idle_s = d.at("idle_s").get<double>();
      m.finish_s = d.at("finish_s").get<double>();
      m.max_in_flight = d.at("max_in_flight").get<int>();
      m.peak_memory_bytes = d.at("peak_memory_gib").get<double>() * kGiB;
      m.capacity_bytes = d.at("capacity_gib").get<double>() * kGiB;
      m.memory = d.at("memory");
      if (d.contains("sequence_group")) {
        m.sequence_group = d.at("sequence_group").get<int>();
        m.ulysses_wait_s = d.at("ulysses_wait_s").get<double>();
        m.ring_wait_s = d.at("ring_wait_s").get<double>();
      }
      r.devices.push_back(std::move(m));
    }
    for (const auto& l : j.at("links")) {
      r.links.push_back({l.at("name").get<std::string>(), l.at("kind").get<std::string>(),
                         l.at("bandwidth_GBps").get<double>() * 1e9, l.at("bytes").get<double>(),
                         l.at("utilisation").get<double>()});
    }
    return r;
  } catch (const Json::exception& e) {
    return failure(std::string("simulation report: ") + e.what());
  }
}

}  // namespace hexi

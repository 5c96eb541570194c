// RankRuntime's public face and its checkpoint files.

#include "engine/runtime.hpp"

#include <algorithm>
#include <sstream>

#include "engine/runtime_impl.hpp"

namespace hexi::engine {

RankRuntime::RankRuntime(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RankRuntime::~RankRuntime() {
  // The progress description must not outlive the runtime it points into.
  impl_->progress.enter([] { return std::string("shutting down"); }, false);
}

Result<std::unique_ptr<RankRuntime>> RankRuntime::create(const Program& program, const Model& model,
                                                         Communicator& world, Backend& backend,
                                                         const DataSource& data,
                                                         const RuntimeOptions& options,
                                                         Progress& progress) {
  auto impl = std::make_unique<Impl>(program, model, world, backend, data, options, progress);
  HEXI_TRY(impl->setup());
  return std::unique_ptr<RankRuntime>(new RankRuntime(std::move(impl)));
}

Result<StepStats> RankRuntime::step() {
  return impl_->step();
}
int RankRuntime::device() const {
  return impl_->lay->device;
}
int RankRuntime::steps_done() const {
  return impl_->steps;
}
const kernels::ParamLayout& RankRuntime::layout() const {
  return impl_->layout;
}
const std::vector<char>& RankRuntime::owned() const {
  return impl_->owned;
}

Result<std::vector<float>> RankRuntime::params() const {
  std::vector<float> host(impl_->layout.total);
  HEXI_TRY(impl_->be.download(host.data(), impl_->params.get(), host.size() * sizeof(float)));
  return host;
}

Result<std::vector<float>> RankRuntime::grads() const {
  std::vector<float> host(impl_->layout.total);
  HEXI_TRY(impl_->be.download(host.data(), impl_->grads.get(), host.size() * sizeof(float)));
  return host;
}

// ---- checkpoint ------------------------------------------------------------------------
// Format: engine/checkpoint.hpp; crash-safe files: engine/checkpoint_files.hpp.
namespace {

// What must match for a resume: the program (op stream and layout) of this device.
std::string fingerprint(const RankRuntime::Impl& r) {
  std::ostringstream s;
  s << r.prog.model << "|" << r.prog.global_batch << "|" << r.prog.seq_len << "|"
    << r.prog.zero_stage << "|" << r.lay->op_end - r.lay->op_begin << "|" << r.layout.total << "|"
    << r.moment1.size();
  for (const auto& t : r.layout.tensors)
    s << "|" << t.name << ":" << t.row_begin << "," << t.col_begin << "," << t.rows << "x"
      << t.cols;
  Fnv1a digest;
  const std::string text = s.str();
  digest.update(text.data(), text.size());
  return digest.hex();
}

// The manifest is of this plan: the same devices (each device's file then carries the
// fingerprint of its own part).
Status check_devices(const CheckpointManifest& manifest, const Program& prog,
                     const std::string& where) {
  const std::string why = where + ": written for another plan: ";
  const std::string fix = "; resume with the same scenario and plan";
  if (manifest.files.size() != prog.devices.size()) {
    return bad_input(why + "a checkpoint of " + std::to_string(manifest.files.size()) +
                     " devices, this plan uses " + std::to_string(prog.devices.size()) + fix);
  }
  for (const auto& l : prog.devices) {
    auto saved = [&](const ManifestFile& f) { return f.device == l.device; };
    if (std::none_of(manifest.files.begin(), manifest.files.end(), saved))
      return bad_input(why + "it has no file for device " + std::to_string(l.device) + fix);
  }
  return {};
}

}  // namespace

Result<ManifestFile> RankRuntime::save(const std::filesystem::path& dir, SavePoints& points) const {
  const Impl& r = *impl_;
  auto p = params();
  HEXI_TRY(p);
  std::vector<float> m(r.moment1.size()), v(r.moment2.size());
  HEXI_TRY(r.be.download(m.data(), r.moment1.get(), m.size() * sizeof(float)));
  HEXI_TRY(r.be.download(v.data(), r.moment2.get(), v.size() * sizeof(float)));
  CheckpointHeader header{r.lay->device, r.steps, fingerprint(r),
                          static_cast<std::int64_t>(p->size()),
                          static_cast<std::int64_t>(m.size())};
  return write_device_file(dir, header, {*p, m, v}, points);
}

Status RankRuntime::load(const std::filesystem::path& dir) {
  Impl& r = *impl_;
  auto manifest = read_manifest(dir);
  HEXI_TRY(manifest);
  HEXI_TRY(check_devices(*manifest, r.prog, manifest_path(dir).string()));
  auto c = read_device_file(dir, *manifest, r.lay->device, [&r] {
    r.progress.enter([] { return std::string("reading the checkpoint"); }, false);
  });
  HEXI_TRY(c);
  const CheckpointHeader& h = c->header;
  if (h.fingerprint != fingerprint(r) || c->params.size() != r.layout.total ||
      c->moment1.size() != r.moment1.size()) {
    return bad_input(c->file.string() +
                     ": written for another plan, model or training config; resume with the "
                     "same scenario and plan");
  }
  HEXI_TRY(r.be.upload(r.params.get(), c->params.data(), c->params.size() * sizeof(float)));
  HEXI_TRY(r.be.upload(r.moment1.get(), c->moment1.data(), c->moment1.size() * sizeof(float)));
  HEXI_TRY(r.be.upload(r.moment2.get(), c->moment2.data(), c->moment2.size() * sizeof(float)));
  r.steps = h.steps;
  return {};
}

}  // namespace hexi::engine

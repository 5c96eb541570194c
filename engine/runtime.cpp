// RankRuntime's public face and its checkpoint files.

#include "engine/runtime.hpp"

#include <fstream>
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
// <dir>/device-<d>.ckpt: one JSON header line, then float32 little-endian: parameters
// (layout order), AdamW first moments, second moments (owned runs in order).
namespace {

constexpr const char* kFormat = "hexisim-checkpoint";

std::filesystem::path ckpt_path(const std::filesystem::path& dir, int device) {
  return dir / ("device-" + std::to_string(device) + ".ckpt");
}

// What must match for a resume: the program (op stream and layout) of this device.
std::string fingerprint(const RankRuntime::Impl& r) {
  std::ostringstream s;
  s << r.prog.model << "|" << r.prog.global_batch << "|" << r.prog.seq_len << "|"
    << r.prog.zero_stage << "|" << r.lay->op_end - r.lay->op_begin << "|" << r.layout.total << "|"
    << r.moment1.size();
  for (const auto& t : r.layout.tensors)
    s << "|" << t.name << ":" << t.row_begin << "," << t.col_begin << "," << t.rows << "x"
      << t.cols;
  std::uint64_t fnv = 1469598103934665603ull;  // FNV-1a: stable across builds and machines
  for (unsigned char c : s.str()) fnv = (fnv ^ c) * 1099511628211ull;
  return std::to_string(fnv);
}

}  // namespace

Status RankRuntime::save(const std::filesystem::path& dir) const {
  const Impl& r = *impl_;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return failure(dir.string() + ": cannot create the checkpoint folder: " + ec.message());
  auto p = params();
  HEXI_TRY(p);
  std::vector<float> m(r.moment1.size()), v(r.moment2.size());
  HEXI_TRY(r.be.download(m.data(), r.moment1.get(), m.size() * sizeof(float)));
  HEXI_TRY(r.be.download(v.data(), r.moment2.get(), v.size() * sizeof(float)));
  Json header = {{"format", kFormat},
                 {"version", 1},
                 {"device", r.lay->device},
                 {"steps", r.steps},
                 {"fingerprint", fingerprint(r)},
                 {"params", p->size()},
                 {"moments", m.size()}};
  const auto path = ckpt_path(dir, r.lay->device);
  std::ofstream out(path, std::ios::binary);
  if (!out) return failure(path.string() + ": cannot open for writing");
  out << header.dump() << "\n";
  for (const auto* vec : {&*p, &m, &v}) {
    out.write(reinterpret_cast<const char*>(vec->data()),
              static_cast<std::streamsize>(vec->size() * sizeof(float)));
  }
  out.close();
  if (!out) return failure(path.string() + ": write failed");
  return {};
}

Status RankRuntime::load(const std::filesystem::path& dir) {
  Impl& r = *impl_;
  const auto path = ckpt_path(dir, r.lay->device);
  std::ifstream in(path, std::ios::binary);
  if (!in) return bad_input(path.string() + ": cannot open the checkpoint (does it exist?)");
  std::string line;
  std::getline(in, line);
  auto header = parse_json_text(line, path.string());
  HEXI_TRY(header);
  const Json& h = *header;
  if (!h.is_object() || h.value("format", "") != kFormat || h.value("version", 0) != 1) {
    return bad_input(path.string() + ": not a hexisim checkpoint (format version 1)");
  }
  if (h.value("fingerprint", "") != fingerprint(r)) {
    return bad_input(path.string() +
                     ": written for another plan, model or training config; resume with the "
                     "same scenario and plan");
  }
  std::vector<float> p(r.layout.total), m(r.moment1.size()), v(r.moment2.size());
  for (auto* vec : {&p, &m, &v}) {
    in.read(reinterpret_cast<char*>(vec->data()),
            static_cast<std::streamsize>(vec->size() * sizeof(float)));
  }
  if (!in) return bad_input(path.string() + ": truncated");
  HEXI_TRY(r.be.upload(r.params.get(), p.data(), p.size() * sizeof(float)));
  HEXI_TRY(r.be.upload(r.moment1.get(), m.data(), m.size() * sizeof(float)));
  HEXI_TRY(r.be.upload(r.moment2.get(), v.data(), v.size() * sizeof(float)));
  r.steps = h.value("steps", 0);
  return {};
}

}  // namespace hexi::engine

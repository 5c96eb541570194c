#include "kernels/oracle.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

namespace hexi::kernels {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "hexisim-oracle";
constexpr int kVersion = 1;

LlamaDims read_dims(const json& j) {
  LlamaDims d;
  d.layers = j.at("layers").get<int>();
  d.hidden = j.at("hidden").get<int>();
  d.ffn = j.at("ffn").get<int>();
  d.heads = j.at("heads").get<int>();
  d.kv_heads = j.at("kv_heads").get<int>();
  d.vocab = j.at("vocab").get<int>();
  d.norm_eps = j.at("norm_eps").get<double>();
  d.rope_theta = j.at("rope_theta").get<double>();
  d.experts = j.value("experts", 0);  // a mixture of experts' (absent: dense)
  d.top_k = j.value("top_k", 0);
  d.shared_ffn = j.value("shared_ffn", 0);
  return d;
}

AdamWConfig read_adamw(const json& j, Oracle& o) {
  AdamWConfig c;
  c.lr = j.at("lr").get<double>();
  c.beta1 = j.at("beta1").get<double>();
  c.beta2 = j.at("beta2").get<double>();
  c.eps = j.at("eps").get<double>();
  c.weight_decay = j.at("weight_decay").get<double>();
  o.loss_after_1 = j.at("loss_after_1").get<double>();
  o.loss_after_2 = j.at("loss_after_2").get<double>();
  return c;
}

// Fills the scalar fields; throws nlohmann::json::exception on a missing/mistyped key.
void read_header(const json& h, Oracle& o) {
  o.dims = read_dims(h.at("dims"));
  o.init.seed = h.at("init").at("seed").get<std::uint64_t>();
  o.init.norm_jitter = h.at("init").at("norm_jitter").get<double>();
  o.batch = h.at("batch").get<int>();
  o.seq = h.at("seq").get<int>();
  o.tokens = h.at("tokens").get<std::vector<int>>();
  o.targets = h.at("targets").get<std::vector<int>>();
  o.loss = h.at("loss").get<double>();
  o.adamw = read_adamw(h.at("adamw"), o);
  o.torch_version = h.at("torch").get<std::string>();
  for (const json& s : h.at("init_check"))
    o.init_samples.push_back({s.at("name").get<std::string>(), s.at("index").get<std::size_t>(),
                              s.at("value").get<float>()});
}

// Copies each listed tensor out of the float32 blob; false with `error` when out of range.
bool read_tensors(const json& list, const std::string& blob, Oracle& o, std::string& error) {
  const std::size_t floats = blob.size() / sizeof(float);
  for (const json& t : list) {
    std::size_t count = 1;
    for (const json& dim : t.at("shape")) count *= dim.get<std::size_t>();
    const std::size_t offset = t.at("offset").get<std::size_t>();
    const std::string name = t.at("name").get<std::string>();
    if (offset + count > floats) {
      error = "tensor " + name + " lies past the end of the data (" + std::to_string(floats) +
              " floats)";
      return false;
    }
    std::vector<float> values(count);
    std::memcpy(values.data(), blob.data() + offset * sizeof(float), count * sizeof(float));
    o.tensors.emplace(name, std::move(values));
  }
  return true;
}

}  // namespace

bool load_oracle(const std::string& path, Oracle& out, std::string& error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = path + ": cannot open (regenerate with /usr/bin/python3 scripts/make_oracle.py)";
    return false;
  }
  std::string header_line;
  std::getline(in, header_line);
  const std::string blob((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  try {
    const json h = json::parse(header_line);
    if (h.at("format") != kFormat || h.at("version") != kVersion) {
      error = path + ": expected format \"" + kFormat + "\" version " + std::to_string(kVersion);
      return false;
    }
    Oracle o;
    read_header(h, o);
    if (!read_tensors(h.at("tensors"), blob, o, error)) {
      error = path + ": " + error;
      return false;
    }
    out = std::move(o);
    return true;
  } catch (const json::exception& e) {
    error = path + ": bad header: " + e.what();
    return false;
  }
}

std::string oracle_path(const std::string& model, const std::string& precision) {
  const char* root = std::getenv("HEXISIM_ROOT");
  const std::string base = (root && *root) ? root : HEXISIM_KERNELS_SOURCE_ROOT;
  std::string stem = model;
  std::replace(stem.begin(), stem.end(), '-', '_');
  return base + "/kernels/testdata/" + stem + "_oracle" +
         (precision == "fp32" ? std::string() : "_" + precision) + ".bin";
}

std::string default_oracle_path(const std::string& precision) {
  return oracle_path("tiny-llama", precision);
}

}  // namespace hexi::kernels

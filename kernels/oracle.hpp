#pragma once
// Reader of the PyTorch oracle file written by scripts/make_oracle.py (an independent oracle: a
// program nobody here wrote): kernels/testdata/tiny_llama_oracle.bin. Format "hexisim-oracle"
// version 1:
//   line 1: a JSON header terminated by '\n'
//   then:   raw little-endian float32 values; the header's "tensors" list gives each
//           tensor's name, shape and offset (in floats) into that blob.
// Header fields: dims, init (seed, norm_jitter, scheme), batch, seq, tokens and targets
// (batch*seq each), loss, adamw (lr, betas, eps, weight_decay, loss_after_1,
// loss_after_2), init_check (per-tensor samples of the initial weights), tensors.
// Tensor names: "grad/<param>" for every parameter's gradient at the initial weights,
// "adamw1/<param>" for some parameters after one AdamW step.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kernels/optimizer.hpp"
#include "kernels/params.hpp"
#include "kernels/shapes.hpp"

namespace hexi::kernels {

struct OracleSample {  // an exact initial weight value, to check init_params bit for bit
  std::string name;
  std::size_t index = 0;  // row-major in the full tensor
  float value = 0;
};

struct Oracle {
  LlamaDims dims;
  InitConfig init;
  int batch = 0;
  int seq = 0;
  std::vector<int> tokens;   // (batch, seq)
  std::vector<int> targets;  // (batch, seq)
  double loss = 0;           // mean cross-entropy at the initial weights
  AdamWConfig adamw;
  double loss_after_1 = 0;  // after one AdamW step
  double loss_after_2 = 0;  // after two
  std::vector<OracleSample> init_samples;
  std::map<std::string, std::vector<float>> tensors;  // by name, row-major
  std::string torch_version;
};

// Reads `path`; on failure returns false and sets `error` to a message naming the file
// and what was expected (never throws on bad input).
bool load_oracle(const std::string& path, Oracle& out, std::string& error);

// Where the committed oracle file is: $HEXISIM_ROOT/kernels/testdata/... when
// HEXISIM_ROOT is set, otherwise relative to the source tree this was built from.
// "fp32": tiny_llama_oracle.bin; "bf16": tiny_llama_oracle_bf16.bin, the same model in
// bf16 mixed precision (scripts/make_oracle.py --precision bf16).
std::string default_oracle_path(const std::string& precision = "fp32");
// The oracle of another model of scripts/make_oracle.py --model: <model with '_' for
// '-'>_oracle[_bf16].bin (tiny-llama: default_oracle_path).
std::string oracle_path(const std::string& model, const std::string& precision = "fp32");

}  // namespace hexi::kernels

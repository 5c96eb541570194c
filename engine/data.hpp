#pragma once
// Deterministic training data. Sequences are numbered globally so that every plan
// sees the same global batch: sequence j (0 <= j < G) of step k is global sequence
// g = k*G + j; pipeline p takes sequences [offset_p, offset_p + batch_p) of each
// step (offset_p = sum of the batches of pipelines before it), micro-batch i of a
// pipeline the next micro_batch of those, in order. A single-process run of the same
// global batch therefore sees exactly the same tokens.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "topologies/status.hpp"

namespace hexi::engine {

class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual int seq_len() const = 0;
  // tokens and targets (seq_len each, in [0, vocab)) of global sequence g >= 0.
  virtual void sequence(std::int64_t g, int* tokens, int* targets) const = 0;
};

// Byte-level language modelling over a text file (tokens are bytes, vocab 256):
// sequence g reads seq_len + 1 bytes at offset (a*g + c) mod M, M = bytes - seq_len,
// with a fixed stride a coprime to M (consecutive sequences spread over the corpus,
// every offset visited once per M sequences) and c from the seed.
class CorpusSource final : public DataSource {
 public:
  static Result<CorpusSource> load(const std::filesystem::path& path, int seq_len,
                                   std::uint64_t seed);
  int seq_len() const override { return seq_len_; }
  void sequence(std::int64_t g, int* tokens, int* targets) const override;
  std::size_t bytes() const { return text_.size(); }

 private:
  std::string text_;
  int seq_len_ = 0;
  std::uint64_t modulus_ = 1;  // M
  std::uint64_t stride_ = 1;   // a
  std::uint64_t shift_ = 0;    // c
};

// Fixed sequences (e.g. the PyTorch oracle's batch), cycled: sequence g is row
// g mod rows of the (rows, seq_len) arrays.
class FixedSource final : public DataSource {
 public:
  FixedSource(std::vector<int> tokens, std::vector<int> targets, int seq_len);
  int seq_len() const override { return seq_len_; }
  void sequence(std::int64_t g, int* tokens, int* targets) const override;

 private:
  std::vector<int> tokens_, targets_;
  int seq_len_ = 0;
};

// The tokens and targets (b, s) of `b` consecutive sequences of step `step` starting at
// sequence `first` of the global batch of `global_batch` sequences.
void batch_tokens(const DataSource& src, int global_batch, std::int64_t step, int first, int b,
                  int* tokens, int* targets);

// The shipped corpus: engine/corpus/gpl-3.0.txt under data_root().
std::filesystem::path default_corpus();

}  // namespace hexi::engine

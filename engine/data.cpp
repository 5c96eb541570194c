#include "engine/data.hpp"

#include <algorithm>
#include <fstream>
#include <numeric>
#include <sstream>

#include "topologies/paths.hpp"

namespace hexi::engine {

namespace {
// splitmix64 (Steele et al. 2014): a well-mixed 64-bit hash of the seed.
std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

Result<CorpusSource> CorpusSource::load(const std::filesystem::path& path, int seq_len,
                                        std::uint64_t seed) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return bad_input(path.string() + ": cannot open the corpus (does it exist?)");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  CorpusSource src;
  src.text_ = buffer.str();
  src.seq_len_ = seq_len;
  if (seq_len < 1 || src.text_.size() < static_cast<std::size_t>(seq_len) + 2) {
    return bad_input(path.string() + ": the corpus has " + std::to_string(src.text_.size()) +
                     " bytes, expected at least seq_len + 2 = " + std::to_string(seq_len + 2));
  }
  src.modulus_ = src.text_.size() - seq_len;  // offsets 0..M-1 leave seq_len + 1 bytes
  // A stride near M/phi (golden ratio) spreads consecutive sequences; make it coprime.
  src.stride_ = static_cast<std::uint64_t>(static_cast<double>(src.modulus_) * 0.6180339887) | 1u;
  while (std::gcd(src.stride_, src.modulus_) != 1) src.stride_ += 2;
  src.shift_ = splitmix64(seed) % src.modulus_;
  return src;
}

void CorpusSource::sequence(std::int64_t g, int* tokens, int* targets) const {
  const std::uint64_t offset =
      (static_cast<std::uint64_t>(g) % modulus_ * stride_ + shift_) % modulus_;
  for (int i = 0; i < seq_len_; ++i) {
    tokens[i] = static_cast<unsigned char>(text_[offset + i]);
    targets[i] = static_cast<unsigned char>(text_[offset + i + 1]);
  }
}

FixedSource::FixedSource(std::vector<int> tokens, std::vector<int> targets, int seq_len)
    : tokens_(std::move(tokens)), targets_(std::move(targets)), seq_len_(seq_len) {}

void FixedSource::sequence(std::int64_t g, int* tokens, int* targets) const {
  const std::int64_t rows = static_cast<std::int64_t>(tokens_.size()) / seq_len_;
  const std::size_t row = static_cast<std::size_t>(g % rows) * seq_len_;
  std::copy_n(tokens_.begin() + row, seq_len_, tokens);
  std::copy_n(targets_.begin() + row, seq_len_, targets);
}

void batch_tokens(const DataSource& src, int global_batch, std::int64_t step, int first, int b,
                  int* tokens, int* targets) {
  const int s = src.seq_len();
  for (int i = 0; i < b; ++i) {
    src.sequence(step * global_batch + first + i, tokens + i * s, targets + i * s);
  }
}

std::filesystem::path default_corpus() {
  return data_root() / "engine/corpus/gpl-3.0.txt";
}

}  // namespace hexi::engine

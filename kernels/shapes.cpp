#include "kernels/shapes.hpp"

#include <string>

namespace hexi::kernels {
namespace {

std::string str(int v) {
  return std::to_string(v);
}

// [floor(x*rank/tp), floor(x*(rank+1)/tp)): contiguous, as even as integers allow.
int split_point(int x, int rank, int tp) {
  return static_cast<int>(static_cast<long long>(x) * rank / tp);
}

std::string check_range(const char* what, int begin, int end, int limit) {
  if (begin < 0 || end > limit || begin >= end)
    return std::string(what) + " range [" + str(begin) + ", " + str(end) +
           ") is not a non-empty range inside [0, " + str(limit) + ")";
  return {};
}

}  // namespace

std::string validate_dims(const LlamaDims& d) {
  if (d.layers < 1 || d.hidden < 1 || d.ffn < 1 || d.heads < 1 || d.kv_heads < 1 || d.vocab < 1)
    return "layers, hidden, ffn, heads, kv_heads and vocab must all be positive";
  if (d.hidden % d.heads != 0)
    return "hidden " + str(d.hidden) + " is not a multiple of heads " + str(d.heads);
  if (d.heads % d.kv_heads != 0)
    return "heads " + str(d.heads) + " is not a multiple of kv_heads " + str(d.kv_heads);
  if (d.head_dim() % 2 != 0)
    return "head dimension " + str(d.head_dim()) + " must be even for RoPE";
  if (!(d.norm_eps > 0) || !(d.rope_theta > 0)) return "norm_eps and rope_theta must be positive";
  if (d.experts < 0 || d.shared_ffn < 0 || (d.experts == 0 && (d.top_k != 0 || d.shared_ffn != 0)))
    return "experts and shared_ffn must be non-negative, and top_k and shared_ffn zero without "
           "experts";
  if (d.is_moe() && (d.top_k < 1 || d.top_k > d.experts))
    return "top_k " + str(d.top_k) + " is not in [1, experts " + str(d.experts) + "]";
  return {};
}

TpShard full_shard(const LlamaDims& d) {
  return {0, d.heads, 0, d.ffn, 0, d.vocab, 0, d.experts, 0, d.shared_ffn};
}

TpShard tp_shard(const LlamaDims& d, int rank, int tp) {
  TpShard s;
  s.head_begin = split_point(d.heads, rank, tp);
  s.head_end = split_point(d.heads, rank + 1, tp);
  s.ffn_begin = split_point(d.ffn, rank, tp);
  s.ffn_end = split_point(d.ffn, rank + 1, tp);
  s.vocab_begin = split_point(d.vocab, rank, tp);
  s.vocab_end = split_point(d.vocab, rank + 1, tp);
  s.expert_end = d.experts;
  s.shared_begin = split_point(d.shared_ffn, rank, tp);
  s.shared_end = split_point(d.shared_ffn, rank + 1, tp);
  return s;
}

int kv_begin(const LlamaDims& d, const TpShard& s) {
  return s.head_begin / d.group_size();
}
int kv_end(const LlamaDims& d, const TpShard& s) {
  const int g = d.group_size();
  return (s.head_end + g - 1) / g;
}

std::string validate_shard(const LlamaDims& d, const TpShard& s) {
  for (const std::string& e : {check_range("query head", s.head_begin, s.head_end, d.heads),
                               check_range("ffn column", s.ffn_begin, s.ffn_end, d.ffn),
                               check_range("vocab row", s.vocab_begin, s.vocab_end, d.vocab)})
    if (!e.empty()) return e;
  // Possibly empty ranges of a mixture of experts: [begin, end) with 0 <= begin <= end <= limit.
  const auto inside = [](const char* what, int begin, int end, int limit) -> std::string {
    if (begin < 0 || end > limit || begin > end)
      return std::string(what) + " range [" + str(begin) + ", " + str(end) +
             ") is not a range inside [0, " + str(limit) + "]";
    return {};
  };
  for (const std::string& e :
       {inside("routed expert", s.expert_begin, s.expert_end, d.experts),
        inside("shared-expert column", s.shared_begin, s.shared_end, d.shared_ffn)})
    if (!e.empty()) return e;
  const int g = d.group_size();
  const bool whole_groups = s.head_begin % g == 0 && s.head_end % g == 0;
  const bool inside_one_group = kv_end(d, s) - kv_begin(d, s) == 1;
  if (!whole_groups && !inside_one_group)
    return "query heads [" + str(s.head_begin) + ", " + str(s.head_end) +
           ") neither consist of whole KV groups nor lie inside one (group size " + str(g) + ")";
  return {};
}

std::string validate_tp_degree(const LlamaDims& d, int tp) {
  if (tp < 1) return "TP degree " + str(tp) + " must be at least 1";
  if (d.heads % tp != 0)
    return "TP degree " + str(tp) + " does not divide the " + str(d.heads) + " query heads";
  if (d.kv_heads % tp != 0 && tp % d.kv_heads != 0)
    return "TP degree " + str(tp) + " neither divides nor is a multiple of the " + str(d.kv_heads) +
           " KV heads";
  if (tp > d.ffn || tp > d.vocab) return "TP degree " + str(tp) + " exceeds ffn or vocab";
  return {};
}

RankRange kv_sharers(const LlamaDims& d, int rank, int tp) {
  if (tp <= d.kv_heads) return {rank, 1};
  const int per_kv = tp / d.kv_heads;  // ranks per replicated KV head
  return {rank / per_kv * per_kv, per_kv};
}

}  // namespace hexi::kernels

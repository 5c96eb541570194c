#pragma once
// Blockwise causal attention for ring / context-parallel attention (Ring Attention, Liu et al.
// 2023; the zig-zag and mirrored layouts of HexiSeq): the attention of one block of query
// tokens to one block of key/value tokens, with the online softmax of FlashAttention (Dao et
// al. 2022) and the FlashAttention-2 backward (Dao 2023). A ring calls the forward once per
// block pair and merges the partial results with attention_merge; the backward is called
// per block pair with the merged output and log-sum-exp, and the gradients are summed.
//
// Masking is by global token position: key row c is visible to query row r iff
// kv_pos[c] <= q_pos[r]. Positions are arbitrary ints (not necessarily sorted or
// contiguous), so a shard of any layout (diagonal, full, half or fully masked block pairs)
// gets the exact causal mask. Grouped-query attention as in attention_cpu.cpp: query head
// j reads KV head j / (hq / hk).
//
// Memory: the kernels tile queries and keys (64 x 64 tokens) and never hold more than a
// few tiles of scores; scratch is O(tile^2 * hq / hk + tile * d * hq / hk), independent of
// the sequence length.
//
// Layouts (row-major, contiguous): q, out, dq, dout (q_tokens, hq, d); k, v, dk, dv
// (kv_tokens, hk, d); lse (q_tokens, hq), natural log of sum_c exp(q_r . k_c / sqrt(d))
// over the visible keys. A query row that sees no key of the block has lse = -inf and
// out = 0.
//
// bf16 (inputs hold bf16 values): the probabilities P and dS are rounded to bfloat16 before
// the GEMMs that read them, as FlashAttention-2 converts them for its bf16 tensor-core GEMMs;
// S and dP stay in T like that kernel's fp32 accumulators (the dense kernel rounds them
// because it writes them to memory; a fused kernel never does). The partial output, lse and
// the gradients stay in T too: they are accumulators, and the caller rounds the merged output
// and the summed gradients once, as attention_backward rounds dK and dV once after summing a
// KV group's query heads.

namespace hexi::kernels {

// One (query block, key/value block) pair: sizes and the global position of every row (host
// memory for the CPU kernels, device memory for the CUDA ones in cuda_kernels.hpp).
struct AttentionBlockPair {
  int q_tokens = 0;             // rows of the query block
  int kv_tokens = 0;            // rows of the key/value block
  int hq = 0, hk = 0, d = 0;    // query heads, KV heads (hq % hk == 0), head dimension
  const int* q_pos = nullptr;   // (q_tokens) global positions of the query rows
  const int* kv_pos = nullptr;  // (kv_tokens) global positions of the key rows
};

namespace cpu {

// out (q_tokens, hq, d) and lse (q_tokens, hq) overwritten with the attention of the query
// block to the key/value block alone (a partial result for attention_merge).
template <class T>
void blockwise_attention_forward(T* out, T* lse, const T* q, const T* k, const T* v,
                                 const AttentionBlockPair& pair, bool bf16 = false);

// In place on (out, lse): the softmax-weighted combination of two partial results over
// disjoint key sets, out (tokens, heads, d) and lse (tokens, heads) with (out_b, lse_b).
// Merging a row whose lse_b is -inf leaves (out, lse) unchanged, bit for bit; merging into
// a row whose lse is -inf copies (out_b, lse_b).
template <class T>
void attention_merge(T* out, T* lse, const T* out_b, const T* lse_b, int tokens, int heads, int d);

// Gradients of one block pair, accumulated (+=): dq (q_tokens, hq, d), dk and dv
// (kv_tokens, hk, d). out and lse are the FINAL (merged over every key block) output and
// log-sum-exp of the query rows, dout the gradient of that output: P = exp(S - lse) is
// then the block's slice of the full softmax, and summing the calls over all block pairs
// gives the full gradients. dS = P * (dP - D) with D = rowsum(dout * out).
template <class T>
void blockwise_attention_backward(T* dq, T* dk, T* dv, const T* dout, const T* q, const T* k,
                                  const T* v, const T* out, const T* lse,
                                  const AttentionBlockPair& pair, bool bf16 = false);

}  // namespace cpu
}  // namespace hexi::kernels

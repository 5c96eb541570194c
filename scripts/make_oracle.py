#!/usr/bin/python3
"""PyTorch oracle for hexisim's kernels (an independent oracle for the end-to-end numbers): writes the loss and every parameter
gradient of a tiny Llama with fixed weights and data, and one AdamW step, to
kernels/testdata/tiny_llama_oracle.bin. The C++ tests (kernels/oracle_test.cpp and the
engine's) read that committed file; torch is needed only to regenerate it:

    /usr/bin/python3 scripts/make_oracle.py [--precision fp32|bf16] [--model NAME] [--out PATH]

--precision bf16 writes kernels/testdata/tiny_llama_oracle_bf16.bin: the same model trained
in bf16 mixed precision (kernels/blocks.hpp "Precision"): float32 master weights and AdamW,
bf16 copies of the weights in the forward and backward; matmuls in bf16 (torch's CPU bf16
GEMM accumulates in float32 and rounds its output); norms, RoPE, softmax and SwiGLU compute in
float32 from bf16 inputs and round their output to bf16 (fused kernels); the residual stream
is bf16; the loss is float32 cross-entropy of the bf16 logits. Autograd runs the backward in
the same dtypes, so activation gradients are bf16 and the weights' gradients reach the float32
masters through the bf16 -> float32 cast.

Debian's python3-torch (1.13) is importable from /usr/bin/python3 only. It has no
scaled_dot_product_attention, so attention is written out by hand below; autograd, not
hexisim code, produces the gradients.

The model mirrors kernels/llama_model.hpp: token embedding; per layer
x += Wo Attn(RoPE(Wq n), RoPE(Wk n), Wv n) with n = RMSNorm(x), causal, grouped-query
(query head j reads KV head j // (a/k)); x += W_down (silu(W_gate n) * W_up n); logits =
head RMSNorm(x); mean cross-entropy. RoPE uses the "rotate half" pairing (i, i + d/2).

Weights come from the "hash-uniform-v1" scheme of kernels/params.hpp, reproduced here bit
for bit (integer hash, double arithmetic, one rounding to float32), so the file stores
only gradients, not weights, and stays under 1 MB.

File format "hexisim-oracle" version 1: one line of JSON header, then little-endian
float32 data; header["tensors"] lists name, shape and offset (in floats) of each tensor.
"""

import argparse
import json
import math
import os
import sys

import numpy as np
import torch

FORMAT, VERSION = "hexisim-oracle", 1
# tiny-llama of scenarios/models.json.
DIMS = dict(layers=4, hidden=64, ffn=172, heads=4, kv_heads=2, vocab=256,
            norm_eps=1e-5, rope_theta=10000.0)
INIT = dict(scheme="hash-uniform-v1", seed=1234, norm_jitter=0.125)
BATCH, SEQ, DATA_SEED = 2, 32, 7
# --model: the model of scenarios/models.json and the sequence length. tiny-llama-seq has 8
# query heads on 4 kv heads, for the engine's sequence meshes (uneven head splits 5:2:1,
# shards 5:3:2 of 40 tokens in whole mirrored blocks of 2); the same code, init and data
# seed, written to kernels/testdata/tiny_llama_seq_oracle.bin. tiny-llama-8l (8 layers,
# sequence 64) is the model of the deeper pipeline plans (tiny-llama-8l-cpu).
MODELS = {
    "tiny-llama": (DIMS, SEQ),
    "tiny-llama-8l": (dict(DIMS, layers=8), 64),
    "tiny-llama-seq": (dict(DIMS, layers=2, heads=8, kv_heads=4), 40),
    # A mixture of experts (engine MoE plans): 4 experts of width 48, top 2, shared experts
    # of width 32; fp32 only.
    "tiny-moe": (dict(DIMS, layers=2, ffn=48, experts=4, top_k=2, shared_ffn=32), 32),
}
ADAMW = dict(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1)
# Parameters whose values after one AdamW step are stored (a norm gain without decay,
# matrices with decay); all of them would double the file size.
ADAMW_STORED = ["layers.0.attn_norm", "layers.0.wq", "layers.3.wk", "final_norm",
                "layers.1.router", "layers.0.experts.w_down"]

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def layout(d):
    """(name, id, shape) of every tensor, in kernels/params.hpp order."""
    h, hd = d["hidden"], d["hidden"] // d["heads"]
    qd, kd, f, v = d["heads"] * hd, d["kv_heads"] * hd, d["ffn"], d["vocab"]
    e, fs = d.get("experts", 0), d.get("shared_ffn", 0)
    out = [("embedding", (v, h))]
    for l in range(d["layers"]):
        p = f"layers.{l}."
        out += [(p + "attn_norm", (h,)), (p + "wq", (qd, h)), (p + "wk", (kd, h)),
                (p + "wv", (kd, h)), (p + "wo", (h, qd)), (p + "mlp_norm", (h,))]
        if e == 0:
            out += [(p + "w_gate", (f, h)), (p + "w_up", (f, h)), (p + "w_down", (h, f))]
            continue
        # Routed experts stacked as (E, f*h) and (E*h, f) (kernels/params.hpp).
        out += [(p + "router", (e, h)), (p + "experts.w_gate", (e, f * h)),
                (p + "experts.w_up", (e, f * h)), (p + "experts.w_down", (e * h, f))]
        if fs > 0:
            out += [(p + "shared.w_gate", (fs, h)), (p + "shared.w_up", (fs, h)),
                    (p + "shared.w_down", (h, fs))]
    out += [("final_norm", (h,)), ("head", (v, h))]
    return [(name, i, shape) for i, (name, shape) in enumerate(out)]


def hash_uniform(seed, tensor_id, count):
    """splitmix64 of (seed*GOLDEN + (id << 32) + e) >> 40, mapped to [-1, 1)."""
    base = (seed * GOLDEN + (tensor_id << 32)) & MASK64
    z = np.uint64(base) + np.arange(count, dtype=np.uint64) + np.uint64(GOLDEN)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    u = (z >> np.uint64(40)).astype(np.float64)
    return (u - 8388608.0) / 8388608.0


def init_tensor(name, tensor_id, shape, d):
    r = hash_uniform(INIT["seed"], tensor_id, int(np.prod(shape)))
    if len(shape) == 1:
        values = 1.0 + INIT["norm_jitter"] * r
    elif name.endswith(".wo") or name.endswith(".w_down"):
        values = r / 32.0 / math.sqrt(2.0 * d["layers"])
    else:
        values = r / 32.0
    return values.astype(np.float32).reshape(shape)


def rmsnorm(x, w, eps):
    """In float32 whatever the input dtype; the output has the input's dtype."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def rope_tables(seq, hd, theta):
    half = hd // 2
    t = np.arange(seq, dtype=np.float64)[:, None]
    freq = theta ** (-2.0 * np.arange(half, dtype=np.float64) / hd)
    angle = t * freq[None, :]
    return (torch.from_numpy(np.cos(angle).astype(np.float32)),
            torch.from_numpy(np.sin(angle).astype(np.float32)))


def rope(x, cos, sin):  # x (b, s, heads, d); in float32, output in x's dtype
    half = x.shape[-1] // 2
    xf = x.float()
    x1, x2 = xf[..., :half], xf[..., half:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1).to(x.dtype)


def attention(p, l, x, d, cos, sin):
    b, s, _ = x.shape
    a, k, hd = d["heads"], d["kv_heads"], d["hidden"] // d["heads"]
    n = rmsnorm(x, p[f"layers.{l}.attn_norm"], d["norm_eps"])
    q = rope((n @ p[f"layers.{l}.wq"].T).view(b, s, a, hd), cos, sin)
    kk = rope((n @ p[f"layers.{l}.wk"].T).view(b, s, k, hd), cos, sin)
    v = (n @ p[f"layers.{l}.wv"].T).view(b, s, k, hd)
    kk = kk.repeat_interleave(a // k, dim=2).transpose(1, 2)  # (b, a, s, d)
    v = v.repeat_interleave(a // k, dim=2).transpose(1, 2)
    scores = q.transpose(1, 2) @ kk.transpose(-1, -2) / math.sqrt(hd)
    causal = torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1)
    probs = torch.softmax(scores.float().masked_fill(causal, float("-inf")), dim=-1).to(x.dtype)
    out = (probs @ v).transpose(1, 2).reshape(b, s, a * hd)
    return out @ p[f"layers.{l}.wo"].T


def swiglu(n, w_gate, w_up, w_down):
    gate, up = (n @ w_gate.T).float(), (n @ w_up.T).float()
    return (torch.nn.functional.silu(gate) * up).to(n.dtype) @ w_down.T


def mlp(p, l, x, d):
    n = rmsnorm(x, p[f"layers.{l}.mlp_norm"], d["norm_eps"])
    if d.get("experts", 0) > 0:
        return moe(p, f"layers.{l}.", n, d)
    return swiglu(n, p[f"layers.{l}.w_gate"], p[f"layers.{l}.w_up"], p[f"layers.{l}.w_down"])


def moe(p, pre, n, d):
    """Mixtral's router: softmax over the experts, each token's top_k, gates renormalised over
    them; the chosen experts' SwiGLU outputs weighted by their gates, plus shared experts."""
    e, k, f, h = d["experts"], d["top_k"], d["ffn"], d["hidden"]
    x = n.reshape(-1, h)
    probs = torch.softmax((x @ p[pre + "router"].T).float(), dim=-1)
    top, chosen = torch.topk(probs, k, dim=-1)
    gates = (top / top.sum(-1, keepdim=True)).to(x.dtype)
    w_gate = p[pre + "experts.w_gate"].view(e, f, h)
    w_up = p[pre + "experts.w_up"].view(e, f, h)
    w_down = p[pre + "experts.w_down"].view(e, h, f)
    y = torch.zeros_like(x)
    for ex in range(e):
        token, slot = (chosen == ex).nonzero(as_tuple=True)
        if token.numel() == 0:
            continue
        out = swiglu(x[token], w_gate[ex], w_up[ex], w_down[ex])
        y = y.index_add(0, token, gates[token, slot].unsqueeze(-1) * out)
    if d.get("shared_ffn", 0) > 0:
        y = y + swiglu(x, p[pre + "shared.w_gate"], p[pre + "shared.w_up"], p[pre + "shared.w_down"])
    return y.view(n.shape)


def loss_fn(master, tokens, targets, d, dtype=torch.float32):
    """Mean cross-entropy computed with `dtype` copies of the float32 master weights."""
    p = {name: t.to(dtype) for name, t in master.items()}
    cos, sin = rope_tables(tokens.shape[1], d["hidden"] // d["heads"], d["rope_theta"])
    x = p["embedding"][tokens]
    for l in range(d["layers"]):
        x = x + attention(p, l, x, d, cos, sin)
        x = x + mlp(p, l, x, d)
    logits = rmsnorm(x, p["final_norm"], d["norm_eps"]) @ p["head"].T
    return torch.nn.functional.cross_entropy(logits.float().reshape(-1, d["vocab"]),
                                             targets.reshape(-1))


def make_params(d):
    params, samples = {}, []
    for name, tid, shape in layout(d):
        values = init_tensor(name, tid, shape, d)
        flat = values.reshape(-1)
        for index in sorted({0, flat.size // 2, flat.size - 1}):
            samples.append(dict(name=name, index=int(index), value=float(flat[index])))
        params[name] = torch.tensor(values, requires_grad=True)
    return params, samples


def adamw(params):
    decay = [t for t in params.values() if t.dim() >= 2]
    no_decay = [t for t in params.values() if t.dim() < 2]
    return torch.optim.AdamW(
        [dict(params=decay, weight_decay=ADAMW["weight_decay"]),
         dict(params=no_decay, weight_decay=0.0)],
        lr=ADAMW["lr"], betas=(ADAMW["beta1"], ADAMW["beta2"]), eps=ADAMW["eps"],
        foreach=False)


class Blob:
    def __init__(self):
        self.parts, self.entries, self.offset = [], [], 0

    def add(self, name, array):
        a = np.array(array, dtype="<f4", copy=True)  # torch .numpy() shares memory
        self.entries.append(dict(name=name, shape=list(a.shape), offset=self.offset))
        self.parts.append(a.reshape(-1))
        self.offset += a.size


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--model", choices=sorted(MODELS), default="tiny-llama")
    ap.add_argument("--out")
    args = ap.parse_args()
    suffix = "" if args.precision == "fp32" else "_" + args.precision
    stem = args.model.replace("-", "_")
    out = args.out or os.path.join(root, f"kernels/testdata/{stem}_oracle{suffix}.bin")
    dtype = torch.float32 if args.precision == "fp32" else torch.bfloat16
    torch.manual_seed(0)
    torch.set_num_threads(1)  # one summation order: the same file on every machine

    d, seq = MODELS[args.model]
    params, samples = make_params(d)
    gen = torch.Generator().manual_seed(DATA_SEED)
    data = torch.randint(0, d["vocab"], (BATCH, seq + 1), generator=gen)
    tokens, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()

    blob = Blob()
    loss = loss_fn(params, tokens, targets, d, dtype)
    loss.backward()
    for name, _, _ in layout(d):
        blob.add("grad/" + name, params[name].grad.numpy())

    opt = adamw(params)
    opt.step()
    for name in (n for n in ADAMW_STORED if n in params):
        blob.add("adamw1/" + name, params[name].detach().numpy())
    opt.zero_grad()
    loss1 = loss_fn(params, tokens, targets, d, dtype)
    loss1.backward()
    opt.step()
    with torch.no_grad():
        loss2 = loss_fn(params, tokens, targets, d, dtype)

    header = dict(format=FORMAT, version=VERSION, generator="scripts/make_oracle.py",
                  torch=torch.__version__, precision=args.precision, dims=d, init=INIT, batch=BATCH, seq=seq,
                  tokens=tokens.reshape(-1).tolist(), targets=targets.reshape(-1).tolist(),
                  loss=loss.item(),
                  adamw=dict(ADAMW, loss_after_1=loss1.item(), loss_after_2=loss2.item()),
                  init_check=samples, tensors=blob.entries)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "wb") as f:
        f.write(json.dumps(header, separators=(",", ":")).encode() + b"\n")
        f.write(np.concatenate(blob.parts).astype("<f4").tobytes())
    print(f"{out}: loss {loss.item():.6f}, after 1 AdamW step {loss1.item():.6f}, "
          f"after 2 {loss2.item():.6f}, {os.path.getsize(out)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()

# CORRECT a module docstring, __all__ and __version__, debug prints left in (host code and inside step) behind a module-level DEBUG = False, a cache-usage report method, and an `if __name__ == "__main__":` smoke test that traces the step on meta tensors
"""Day 14 capstone: a Llama-architecture decoder running on my own kernels.

My Day 2, 6, 8, 11, 12 and 14 kernels are registered as torch.library custom ops in the `course`
namespace (each with a fake implementation for torch.compile), the prompt is prefilled eagerly with
Day 12's flash attention, and each decode step (Day 11's paged attention) is replayed from a CUDA graph
after plan() has written the step's positions and page table into static buffers.
"""
import math

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["use_kernels", "Decoder", "KERNELS"]
__version__ = "0.3"

DEBUG = False  # set True to print what plan/capture/decode do

KERNELS = {}


def use_kernels(kernels):
    """Called with {exercise id: built extension} before any op runs."""
    if DEBUG:
        print(f"[decoder] use_kernels: {sorted(kernels)}")
    KERNELS.clear()
    KERNELS.update(kernels)


# ----------------------------------------------------------------------------------------- ops
@torch.library.custom_op("course::rmsnorm", mutates_args=())
def rmsnorm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    k = KERNELS["day06.rmsnorm"]
    out = torch.empty_like(x)
    run = k.rmsnorm_bf16 if x.dtype == torch.bfloat16 else k.rmsnorm_fp16
    run(out, x, weight, x.shape[0], x.shape[1], eps)
    return out


@rmsnorm.register_fake
def _(x, weight, eps):
    return torch.empty_like(x)


@torch.library.custom_op("course::fused_add_rmsnorm", mutates_args=("x", "residual"))
def fused_add_rmsnorm(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> None:
    k = KERNELS["day06.fused_add_rmsnorm"]
    run = k.fused_add_rmsnorm_bf16 if x.dtype == torch.bfloat16 else k.fused_add_rmsnorm_fp16
    run(x, residual, weight, x.shape[0], x.shape[1], eps)


@fused_add_rmsnorm.register_fake
def _(x, residual, weight, eps):
    return None


@torch.library.custom_op("course::rope", mutates_args=("q", "k"))
def rope(q: Tensor, k: Tensor, positions: Tensor, theta: float) -> None:
    m = KERNELS["day14.rope"]
    run = m.rope_bf16 if q.dtype == torch.bfloat16 else m.rope_fp16
    run(q, k, positions, q.shape[0], q.shape[1], k.shape[1], q.shape[2], q.stride(0), k.stride(0), theta)


@rope.register_fake
def _(q, k, positions, theta):
    return None


@torch.library.custom_op("course::silu_and_mul", mutates_args=())
def silu_and_mul(x: Tensor) -> Tensor:
    k = KERNELS["day02.silu_and_mul"]
    d = x.shape[1] // 2
    out = x.new_empty(x.shape[0], d)
    run = k.silu_and_mul_bf16 if x.dtype == torch.bfloat16 else k.silu_and_mul_fp16
    run(out, x, x.shape[0], d)
    return out


@silu_and_mul.register_fake
def _(x):
    return x.new_empty(x.shape[0], x.shape[1] // 2)


@torch.library.custom_op("course::prefill_attention", mutates_args=())
def prefill_attention(q: Tensor, k: Tensor, v: Tensor, sm_scale: float) -> Tensor:
    m = KERNELS["day12.flash_attention"]
    b, n, qo, d = q.shape
    o = q.new_empty(b, n, qo, d)
    lse = torch.empty(b, n, qo, dtype=torch.float32, device=q.device)
    run = m.flash_attention_bf16 if q.dtype == torch.bfloat16 else m.flash_attention_fp16
    run(o, lse, q, k, v, b, n, n, qo, k.shape[2], d, q.stride(1), k.stride(1), True, sm_scale)
    return o


@prefill_attention.register_fake
def _(q, k, v, sm_scale):
    return q.new_empty(q.shape)


@torch.library.custom_op("course::decode_attention", mutates_args=())
def decode_attention(q: Tensor, kv_cache: Tensor, kv_indptr: Tensor, kv_indices: Tensor, kv_last_page_len: Tensor,
                     sm_scale: float) -> Tensor:
    m = KERNELS["day11.batch_decode"]
    b, qo, d = q.shape
    o = q.new_empty(b, qo, d)
    lse = torch.empty(b, qo, dtype=torch.float32, device=q.device)
    ws = torch.empty(1024 * qo * (d + 1), dtype=torch.float32, device=q.device)
    run = m.batch_decode_bf16 if q.dtype == torch.bfloat16 else m.batch_decode_fp16
    run(o, lse, q, kv_cache, kv_indptr, kv_indices, kv_last_page_len, ws, ws.numel(), b, qo, kv_cache.shape[3], d,
        kv_cache.shape[2], sm_scale)
    return o


@decode_attention.register_fake
def _(q, kv_cache, kv_indptr, kv_indices, kv_last_page_len, sm_scale):
    return q.new_empty(q.shape)


@torch.library.custom_op("course::top_p_sampling", mutates_args=())
def top_p_sampling(probs: Tensor, top_p: Tensor, seed: int, offset: int) -> Tensor:
    tokens = torch.empty(probs.shape[0], dtype=torch.int64, device=probs.device)
    KERNELS["day08.top_p_sampling"].top_p_sampling(tokens, probs, top_p, probs.shape[0], probs.shape[1], seed, offset)
    return tokens


@top_p_sampling.register_fake
def _(probs, top_p, seed, offset):
    return torch.empty(probs.shape[0], dtype=torch.int64, device=probs.device)


# --------------------------------------------------------------------------------------- model
class Decoder:
    """Llama on my kernels: prefill(prompts) -> capture() -> decode(tokens) per step."""

    PREFILL_TOKENS = 16384

    def __init__(self, weights, cfg, max_batch, max_len, page_size=16):
        self.w = weights
        self.cfg = cfg
        self.ps = page_size
        self.device = weights["embed"].device
        self.dtype = weights["embed"].dtype
        self.max_batch = max_batch
        self.max_len = max_len
        self.pages_per_request = -(-max_len // page_size)
        self.kv = []
        for _ in range(cfg["layers"]):
            self.kv.append(torch.zeros(max_batch * self.pages_per_request, 2, page_size, cfg["kv_heads"],
                                       cfg["head_dim"], dtype=self.dtype, device=self.device))
        self.lens = []
        self.batch = 0
        self.graph = None
        self.static_logits = None
        self.sm_scale = 1.0 / math.sqrt(cfg["head_dim"])
        b, p = max_batch, self.pages_per_request
        self.plan_buf = torch.zeros(3 * b + (b + 1) + b * p + b, dtype=torch.int64, device=self.device)
        self.static_tokens = torch.zeros(max_batch, dtype=torch.int64, device=self.device)
        if DEBUG:
            print(f"[decoder] {cfg['layers']} layers, {len(self.kv)} caches of {tuple(self.kv[0].shape)} "
                  f"({sum(c.numel() * c.element_size() for c in self.kv) / 2**20:.1f} MiB) on {self.device}")

    def cache_usage(self):
        """Pages in use per request (for my own debugging)."""
        return [-(-n // self.ps) for n in self.lens]

    def plan(self, lens):
        b, p, ps = len(lens), self.pages_per_request, self.ps
        positions, k_rows, v_rows, indptr, indices, last = [], [], [], [0], [], []
        for r, n in enumerate(lens):
            page = r * p + n // ps
            row = page * 2 * ps + n % ps
            used = n // ps + 1
            positions.append(n)
            k_rows.append(row)
            v_rows.append(row + ps)
            indptr.append(indptr[-1] + used)
            indices.extend(range(r * p, r * p + used))
            last.append(n + 1 - (used - 1) * ps)
        indices.extend([0] * (self.max_batch * p - len(indices)))
        host = torch.tensor(positions + k_rows + v_rows + indptr + indices + last, dtype=torch.int64)
        self.plan_buf[:host.numel()].copy_(host)
        self.batch = b
        if DEBUG:
            print(f"[decoder] plan lens={list(lens)} indptr={indptr} last={last}")

    def _planned(self):
        b, total = self.batch, self.max_batch * self.pages_per_request
        buf = self.plan_buf
        o = 4 * b + 1
        return (buf[:b].int(), buf[b:2 * b], buf[2 * b:3 * b], buf[3 * b:o].int(), buf[o:o + total].int(),
                buf[o + total:o + total + b].int())

    def _layer(self, i, h, residual, positions, store, attend):
        c = self.cfg
        qo, kvh, d = c["heads"], c["kv_heads"], c["head_dim"]
        pre = f"layers.{i}."
        if i == 0:
            residual.copy_(h)
            h = torch.ops.course.rmsnorm(h, self.w[pre + "input_norm"], c["eps"])
        else:
            torch.ops.course.fused_add_rmsnorm(h, residual, self.w[pre + "input_norm"], c["eps"])
        qkv = F.linear(h, self.w[pre + "wqkv"])
        t = qkv.shape[0]
        q = qkv[:, :qo * d].view(t, qo, d)
        k = qkv[:, qo * d:(qo + kvh) * d].view(t, kvh, d)
        v = qkv[:, (qo + kvh) * d:].view(t, kvh, d)
        torch.ops.course.rope(q, k, positions, c["rope_theta"])
        store(k, v)
        h = F.linear(attend(q, k, v).view(t, qo * d), self.w[pre + "wo"])
        torch.ops.course.fused_add_rmsnorm(h, residual, self.w[pre + "post_norm"], c["eps"])
        gate_up = F.linear(h, self.w[pre + "w_gate_up"])
        return F.linear(torch.ops.course.silu_and_mul(gate_up), self.w[pre + "w_down"])

    def _store(self, i, k, v, k_rows, v_rows):
        flat = self.kv[i].view(-1, self.cfg["kv_heads"], self.cfg["head_dim"])
        flat.index_copy_(0, k_rows, k)
        flat.index_copy_(0, v_rows, v)

    def _final(self, h, residual):
        torch.ops.course.fused_add_rmsnorm(h, residual, self.w["final_norm"], self.cfg["eps"])
        return F.linear(h, self.w["lm_head"]).float()

    def prefill(self, tokens):
        b, n = tokens.shape
        assert b <= self.max_batch and n <= self.max_len
        if DEBUG:
            print(f"[decoder] prefill {b} prompts of {n} tokens")
        self.lens = [0] * b
        per = max(1, self.PREFILL_TOKENS // n)
        out = []
        start = 0
        while start < b:
            out.append(self._prefill_chunk(tokens[start:start + per], start))
            start += per
        self.lens = [n] * b
        self.batch = b
        return torch.cat(out)

    def _prefill_chunk(self, tokens, first):
        c, ps, p = self.cfg, self.ps, self.pages_per_request
        b, n = tokens.shape
        qo, kvh, d = c["heads"], c["kv_heads"], c["head_dim"]
        pos = torch.arange(n, device=self.device, dtype=torch.int32).repeat(b)
        req = torch.arange(first, first + b, device=self.device).repeat_interleave(n)
        k_rows = (req * p + pos.long() // ps) * 2 * ps + pos.long() % ps
        h = F.embedding(tokens.reshape(-1), self.w["embed"])
        residual = torch.empty_like(h)
        for i in range(c["layers"]):
            h = self._layer(i, h, residual, pos,
                            lambda k, v: self._store(i, k, v, k_rows, k_rows + ps),
                            lambda q, k, v: torch.ops.course.prefill_attention(
                                q.view(b, n, qo, d), k.view(b, n, kvh, d), v.view(b, n, kvh, d), self.sm_scale))
        last = torch.arange(b, device=self.device) * n + n - 1
        return self._final(h[last].contiguous(), residual[last].contiguous())

    def step(self, tokens):
        if DEBUG:  # a constant False: torch.compile drops the branch, no graph break
            print("[decoder] step traced/run")
        pos, k_rows, v_rows, indptr, indices, last = self._planned()
        h = F.embedding(tokens, self.w["embed"])
        residual = torch.empty_like(h)
        for i in range(self.cfg["layers"]):
            cache = self.kv[i]
            h = self._layer(i, h, residual, pos,
                            lambda k, v: self._store(i, k, v, k_rows, v_rows),
                            lambda q, k, v: torch.ops.course.decode_attention(q.contiguous(), cache, indptr, indices,
                                                                              last, self.sm_scale))
        return self._final(h, residual)

    def capture(self):
        self.plan(self.lens)
        tokens = self.static_tokens[:self.batch]
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            self.step(tokens)
        torch.cuda.current_stream().wait_stream(s)
        torch._C._cuda_clearCublasWorkspaces()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_logits = self.step(tokens)
        if DEBUG:
            print(f"[decoder] captured a step for batch {self.batch}, logits {tuple(self.static_logits.shape)}")

    def decode(self, tokens):
        self.plan(self.lens)
        self.static_tokens[:self.batch].copy_(tokens)
        self.graph.replay()
        self.lens = [n + 1 for n in self.lens]
        if DEBUG:
            print(f"[decoder] decoded; pages in use {self.cache_usage()}")
        return self.static_logits

    def sample(self, logits, top_p, seed, offset):
        probs = torch.softmax(logits.float(), dim=-1)
        top = torch.full((logits.shape[0],), top_p, dtype=torch.float32, device=logits.device)
        return torch.ops.course.top_p_sampling(probs, top, seed, offset)


if __name__ == "__main__":
    # Smoke test without a GPU: a tiny config on meta tensors, the decode step traced with fullgraph=True.
    cfg = {"hidden": 64, "heads": 4, "kv_heads": 2, "head_dim": 16, "intermediate": 96, "vocab": 101, "layers": 2,
           "rope_theta": 500000.0, "eps": 1e-5}
    h, d = cfg["hidden"], cfg["head_dim"]
    shapes = {"embed": (cfg["vocab"], h), "final_norm": (h,), "lm_head": (cfg["vocab"], h)}
    for i in range(cfg["layers"]):
        shapes[f"layers.{i}.input_norm"] = (h,)
        shapes[f"layers.{i}.wqkv"] = ((cfg["heads"] + 2 * cfg["kv_heads"]) * d, h)
        shapes[f"layers.{i}.wo"] = (h, cfg["heads"] * d)
        shapes[f"layers.{i}.post_norm"] = (h,)
        shapes[f"layers.{i}.w_gate_up"] = (2 * cfg["intermediate"], h)
        shapes[f"layers.{i}.w_down"] = (h, cfg["intermediate"])
    weights = {k: torch.empty(s, dtype=torch.bfloat16, device="meta") for k, s in shapes.items()}
    model = Decoder(weights, cfg, max_batch=2, max_len=40)
    model.lens = [5, 17]
    model.plan(model.lens)
    logits = torch.compile(model.step, fullgraph=True, backend="eager")(torch.zeros(2, dtype=torch.int64, device="meta"))
    print("step ->", tuple(logits.shape), logits.dtype)

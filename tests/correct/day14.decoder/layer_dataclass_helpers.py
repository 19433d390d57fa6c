# CORRECT per-layer weights and the config in frozen dataclasses, the plan's views in a typing.NamedTuple, the fp16/bf16 kernel choice in one helper, the layer's parts as module-level functions, type hints throughout
# Day 14 capstone: a Llama decoder on my kernels (Days 2, 6, 8, 11, 12, 14) as torch.library ops,
# prefill eager, the decode step captured once as a CUDA graph and replayed.
import math
from dataclasses import dataclass, fields
from typing import Any, Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

# exercise id -> built extension, handed over by use_kernels()
KERNELS: dict[str, Any] = {}


def use_kernels(kernels: dict[str, Any]) -> None:
    KERNELS.clear()
    KERNELS.update(kernels)


def _pick(t: Tensor, bf16: Callable[..., Any], fp16: Callable[..., Any]) -> Callable[..., Any]:
    """The bf16 entry point for bf16 tensors, else the fp16 one."""
    return bf16 if t.dtype == torch.bfloat16 else fp16


# ----------------------------------------------------------------------------------------- ops
@torch.library.custom_op("course::rmsnorm", mutates_args=())
def rmsnorm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    out = torch.empty_like(x)
    k = KERNELS["day06.rmsnorm"]
    _pick(x, k.rmsnorm_bf16, k.rmsnorm_fp16)(out, x, weight, x.shape[0], x.shape[1], eps)
    return out


@rmsnorm.register_fake
def _rmsnorm_fake(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("course::fused_add_rmsnorm", mutates_args=("x", "residual"))
def fused_add_rmsnorm(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> None:
    k = KERNELS["day06.fused_add_rmsnorm"]
    _pick(x, k.fused_add_rmsnorm_bf16, k.fused_add_rmsnorm_fp16)(x, residual, weight, x.shape[0], x.shape[1], eps)


@fused_add_rmsnorm.register_fake
def _fused_add_rmsnorm_fake(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> None:
    return None


@torch.library.custom_op("course::rope", mutates_args=("q", "k"))
def rope(q: Tensor, k: Tensor, positions: Tensor, theta: float) -> None:
    m = KERNELS["day14.rope"]
    tokens, qo_heads, head_dim = q.shape
    _pick(q, m.rope_bf16, m.rope_fp16)(q, k, positions, tokens, qo_heads, k.shape[1], head_dim,
                                       q.stride(0), k.stride(0), theta)


@rope.register_fake
def _rope_fake(q: Tensor, k: Tensor, positions: Tensor, theta: float) -> None:
    return None


@torch.library.custom_op("course::silu_and_mul", mutates_args=())
def silu_and_mul(x: Tensor) -> Tensor:
    d = x.shape[1] // 2
    out = x.new_empty(x.shape[0], d)
    k = KERNELS["day02.silu_and_mul"]
    _pick(x, k.silu_and_mul_bf16, k.silu_and_mul_fp16)(out, x, x.shape[0], d)
    return out


@silu_and_mul.register_fake
def _silu_and_mul_fake(x: Tensor) -> Tensor:
    return x.new_empty(x.shape[0], x.shape[1] // 2)


@torch.library.custom_op("course::prefill_attention", mutates_args=())
def prefill_attention(q: Tensor, k: Tensor, v: Tensor, sm_scale: float) -> Tensor:
    batch, seq, qo_heads, head_dim = q.shape
    o = q.new_empty(batch, seq, qo_heads, head_dim)
    lse = torch.empty(batch, seq, qo_heads, dtype=torch.float32, device=q.device)
    m = KERNELS["day12.flash_attention"]
    _pick(q, m.flash_attention_bf16, m.flash_attention_fp16)(
        o, lse, q, k, v, batch, seq, seq, qo_heads, k.shape[2], head_dim, q.stride(1), k.stride(1), True, sm_scale)
    return o


@prefill_attention.register_fake
def _prefill_attention_fake(q: Tensor, k: Tensor, v: Tensor, sm_scale: float) -> Tensor:
    return q.new_empty(q.shape)


MAX_SPLITS = 1024  # Day 11's split-KV workspace: this many partial states per head


@torch.library.custom_op("course::decode_attention", mutates_args=())
def decode_attention(q: Tensor, kv_cache: Tensor, kv_indptr: Tensor, kv_indices: Tensor, kv_last_page_len: Tensor,
                     sm_scale: float) -> Tensor:
    batch, qo_heads, head_dim = q.shape
    o = q.new_empty(batch, qo_heads, head_dim)
    lse = torch.empty(batch, qo_heads, dtype=torch.float32, device=q.device)
    workspace = torch.empty(MAX_SPLITS * qo_heads * (head_dim + 1), dtype=torch.float32, device=q.device)
    m = KERNELS["day11.batch_decode"]
    _pick(q, m.batch_decode_bf16, m.batch_decode_fp16)(
        o, lse, q, kv_cache, kv_indptr, kv_indices, kv_last_page_len, workspace, workspace.numel(), batch, qo_heads,
        kv_cache.shape[3], head_dim, kv_cache.shape[2], sm_scale)
    return o


@decode_attention.register_fake
def _decode_attention_fake(q: Tensor, kv_cache: Tensor, kv_indptr: Tensor, kv_indices: Tensor,
                           kv_last_page_len: Tensor, sm_scale: float) -> Tensor:
    return q.new_empty(q.shape)


@torch.library.custom_op("course::top_p_sampling", mutates_args=())
def top_p_sampling(probs: Tensor, top_p: Tensor, seed: int, offset: int) -> Tensor:
    tokens = torch.empty(probs.shape[0], dtype=torch.int64, device=probs.device)
    KERNELS["day08.top_p_sampling"].top_p_sampling(tokens, probs, top_p, probs.shape[0], probs.shape[1], seed, offset)
    return tokens


@top_p_sampling.register_fake
def _top_p_sampling_fake(probs: Tensor, top_p: Tensor, seed: int, offset: int) -> Tensor:
    return torch.empty(probs.shape[0], dtype=torch.int64, device=probs.device)


# --------------------------------------------------------------------------------- model pieces
@dataclass(frozen=True)
class Config:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    layers: int
    rope_theta: float
    eps: float

    @classmethod
    def from_dict(cls, cfg: dict[str, Any]) -> "Config":
        return cls(**{f.name: cfg[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class LayerWeights:
    input_norm: Tensor
    wqkv: Tensor        # [(heads + 2 kv_heads) head_dim, hidden]
    wo: Tensor
    post_norm: Tensor
    w_gate_up: Tensor   # [2 intermediate, hidden]
    w_down: Tensor

    @classmethod
    def of_layer(cls, weights: dict[str, Tensor], i: int) -> "LayerWeights":
        return cls(**{f.name: weights[f"layers.{i}.{f.name}"] for f in fields(cls)})


class Plan(NamedTuple):
    """What one decode step reads from the plan buffer (views of it, cast as the kernels want)."""
    positions: Tensor   # int32 [batch]
    k_rows: Tensor      # int64 [batch]
    v_rows: Tensor      # int64 [batch]
    indptr: Tensor      # int32 [batch + 1]
    indices: Tensor     # int32 [max_batch * pages_per_request]
    last_len: Tensor    # int32 [batch]


def split_qkv(qkv: Tensor, cfg: Config) -> tuple[Tensor, Tensor, Tensor]:
    """Column slices of the fused projection [tokens, (qo + 2 kv) d] as q, k, v [tokens, heads, d] views."""
    t, d = qkv.shape[0], cfg.head_dim
    q_end = cfg.heads * d
    k_end = q_end + cfg.kv_heads * d
    return (qkv[:, :q_end].view(t, cfg.heads, d), qkv[:, q_end:k_end].view(t, cfg.kv_heads, d),
            qkv[:, k_end:].view(t, cfg.kv_heads, d))


def attention_input(layer: LayerWeights, cfg: Config, h: Tensor, positions: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """q, k, v of normed h, RoPE applied to q and k in place."""
    q, k, v = split_qkv(F.linear(h, layer.wqkv), cfg)
    torch.ops.course.rope(q, k, positions, cfg.rope_theta)
    return q, k, v


def input_norm(layer: LayerWeights, cfg: Config, first: bool, h: Tensor, residual: Tensor) -> Tensor:
    """Layer 0 normalises the embeddings (and they become the residual); later layers add and norm."""
    if first:
        residual.copy_(h)
        return torch.ops.course.rmsnorm(h, layer.input_norm, cfg.eps)
    torch.ops.course.fused_add_rmsnorm(h, residual, layer.input_norm, cfg.eps)
    return h


def mlp(layer: LayerWeights, cfg: Config, attn_out: Tensor, residual: Tensor) -> Tensor:
    torch.ops.course.fused_add_rmsnorm(attn_out, residual, layer.post_norm, cfg.eps)
    gate_up = F.linear(attn_out, layer.w_gate_up)
    return F.linear(torch.ops.course.silu_and_mul(gate_up), layer.w_down)


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


# ---------------------------------------------------------------------------------------- model
class Decoder:
    PREFILL_TOKENS = 16384  # at most this many prompt tokens per prefill chunk

    def __init__(self, weights: dict[str, Tensor], cfg: dict[str, Any], max_batch: int, max_len: int,
                 page_size: int = 16) -> None:
        self.cfg = Config.from_dict(cfg)
        self.layers = [LayerWeights.of_layer(weights, i) for i in range(self.cfg.layers)]
        self.embed: Tensor = weights["embed"]
        self.final_norm: Tensor = weights["final_norm"]
        self.lm_head: Tensor = weights["lm_head"]
        self.device = self.embed.device
        self.dtype = self.embed.dtype
        self.ps = page_size
        self.max_batch, self.max_len = max_batch, max_len
        self.pages_per_request = cdiv(max_len, page_size)
        self.total_pages = max_batch * self.pages_per_request
        # one paged cache per layer: [pages, 2 (K, V), page_size, kv_heads, head_dim]; request r owns
        # pages r * pages_per_request ... (r + 1) * pages_per_request - 1
        self.kv = [torch.zeros(self.total_pages, 2, page_size, self.cfg.kv_heads, self.cfg.head_dim,
                               dtype=self.dtype, device=self.device) for _ in self.layers]
        self.sm_scale = 1.0 / math.sqrt(self.cfg.head_dim)
        self.lens: list[int] = []
        self.batch = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static_logits: Tensor | None = None
        b = max_batch
        # positions, k rows, v rows, indptr, indices, last page lengths: one int64 buffer
        self.plan_buf = torch.zeros(3 * b + (b + 1) + self.total_pages + b, dtype=torch.int64, device=self.device)
        self.static_tokens = torch.zeros(max_batch, dtype=torch.int64, device=self.device)

    # ------------------------------------------------------------------------------- plan (host)
    def _request_plan(self, r: int, n: int) -> tuple[int, int, list[int], int]:
        """Request r with n cached tokens: its new token's position, K's row in the flat cache, its
        pages after the append and the tokens in its last page."""
        first_page = r * self.pages_per_request
        used = n // self.ps + 1
        k_row = (first_page + n // self.ps) * 2 * self.ps + n % self.ps
        return n, k_row, [first_page + j for j in range(used)], n + 1 - (used - 1) * self.ps

    def plan(self, lens: list[int]) -> None:
        per_request = [self._request_plan(r, n) for r, n in enumerate(lens)]
        positions = [p[0] for p in per_request]
        k_rows = [p[1] for p in per_request]
        v_rows = [row + self.ps for row in k_rows]
        indptr = [0]
        indices: list[int] = []
        for _, _, pages, _ in per_request:
            indices.extend(pages)
            indptr.append(len(indices))
        indices.extend([0] * (self.total_pages - len(indices)))
        last = [p[3] for p in per_request]
        host = torch.tensor(positions + k_rows + v_rows + indptr + indices + last, dtype=torch.int64)
        self.plan_buf[:host.numel()].copy_(host)
        self.batch = len(lens)

    def _planned(self) -> Plan:
        b, buf = self.batch, self.plan_buf
        start = 4 * b + 1
        return Plan(positions=buf[:b].int(), k_rows=buf[b:2 * b], v_rows=buf[2 * b:3 * b],
                    indptr=buf[3 * b:start].int(), indices=buf[start:start + self.total_pages].int(),
                    last_len=buf[start + self.total_pages:start + self.total_pages + b].int())

    # ------------------------------------------------------------------------------------ parts
    def _write_cache(self, i: int, k: Tensor, v: Tensor, k_rows: Tensor, v_rows: Tensor) -> None:
        flat = self.kv[i].view(-1, self.cfg.kv_heads, self.cfg.head_dim)
        flat.index_copy_(0, k_rows, k)
        flat.index_copy_(0, v_rows, v)

    def _logits(self, h: Tensor, residual: Tensor) -> Tensor:
        torch.ops.course.fused_add_rmsnorm(h, residual, self.final_norm, self.cfg.eps)
        return F.linear(h, self.lm_head).float()

    # ---------------------------------------------------------------------------------- prefill
    def prefill(self, tokens: Tensor) -> Tensor:
        b, n = tokens.shape
        assert b <= self.max_batch and n <= self.max_len
        self.lens = [0] * b
        per_chunk = max(1, self.PREFILL_TOKENS // n)
        logits = [self._prefill_chunk(tokens[r:r + per_chunk], r) for r in range(0, b, per_chunk)]
        self.lens = [n] * b
        self.batch = b
        return torch.cat(logits)

    def _prefill_chunk(self, tokens: Tensor, first: int) -> Tensor:
        cfg, ps, p = self.cfg, self.ps, self.pages_per_request
        b, n = tokens.shape
        pos = torch.arange(n, device=self.device, dtype=torch.int32).repeat(b)
        req = torch.arange(first, first + b, device=self.device).repeat_interleave(n)
        t = pos.long()
        k_rows = (req * p + t // ps) * 2 * ps + t % ps
        h = F.embedding(tokens.reshape(-1), self.embed)
        residual = torch.empty_like(h)
        for i, layer in enumerate(self.layers):
            h = input_norm(layer, cfg, i == 0, h, residual)
            q, k, v = attention_input(layer, cfg, h, pos)
            self._write_cache(i, k, v, k_rows, k_rows + ps)
            o = torch.ops.course.prefill_attention(q.view(b, n, cfg.heads, cfg.head_dim),
                                                   k.view(b, n, cfg.kv_heads, cfg.head_dim),
                                                   v.view(b, n, cfg.kv_heads, cfg.head_dim), self.sm_scale)
            h = mlp(layer, cfg, F.linear(o.view(b * n, cfg.heads * cfg.head_dim), layer.wo), residual)
        last_token = torch.arange(b, device=self.device) * n + n - 1
        return self._logits(h[last_token].contiguous(), residual[last_token].contiguous())

    # ----------------------------------------------------------------------------------- decode
    def step(self, tokens: Tensor) -> Tensor:
        cfg = self.cfg
        plan = self._planned()
        h = F.embedding(tokens, self.embed)
        residual = torch.empty_like(h)
        for i, layer in enumerate(self.layers):
            h = input_norm(layer, cfg, i == 0, h, residual)
            q, k, v = attention_input(layer, cfg, h, plan.positions)
            self._write_cache(i, k, v, plan.k_rows, plan.v_rows)
            o = torch.ops.course.decode_attention(q.contiguous(), self.kv[i], plan.indptr, plan.indices,
                                                  plan.last_len, self.sm_scale)
            h = mlp(layer, cfg, F.linear(o.view(-1, cfg.heads * cfg.head_dim), layer.wo), residual)
        return self._logits(h, residual)

    def capture(self) -> None:
        self.plan(self.lens)
        tokens = self.static_tokens[:self.batch]
        warmup = torch.cuda.Stream()
        warmup.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(warmup):
            self.step(tokens)
        torch.cuda.current_stream().wait_stream(warmup)
        torch._C._cuda_clearCublasWorkspaces()  # cuBLAS's workspace from this graph's own pool
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_logits = self.step(tokens)

    def decode(self, tokens: Tensor) -> Tensor:
        self.plan(self.lens)
        self.static_tokens[:self.batch].copy_(tokens)
        self.graph.replay()
        self.lens = [n + 1 for n in self.lens]
        return self.static_logits

    def sample(self, logits: Tensor, top_p: float, seed: int, offset: int) -> Tensor:
        probs = torch.softmax(logits.float(), dim=-1)
        top = torch.full((logits.shape[0],), top_p, dtype=torch.float32, device=logits.device)
        return torch.ops.course.top_p_sampling(probs, top, seed, offset)

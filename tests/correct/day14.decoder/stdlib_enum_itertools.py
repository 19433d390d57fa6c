# CORRECT ops declared with `from torch.library import custom_op, register_fake` and fakes registered by name, the dependencies as a str Enum, the page table built with itertools.accumulate/chain, the plan's views a collections.namedtuple, functools.partial and lru_cache, math.ceil, f-string errors and asserts with messages, type hints everywhere
"""Day 14: my Llama decoder. Kernels from Days 2, 6, 8, 11, 12 and 14 as course:: ops, prefill eager,
decode replayed from a CUDA graph."""
import collections
import enum
import functools
import itertools
import math
from typing import Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.library import custom_op, register_fake


class Dep(str, enum.Enum):
    """The exercises whose kernels the ops call."""
    SILU_AND_MUL = "day02.silu_and_mul"
    RMSNORM = "day06.rmsnorm"
    FUSED_ADD_RMSNORM = "day06.fused_add_rmsnorm"
    TOP_P = "day08.top_p_sampling"
    BATCH_DECODE = "day11.batch_decode"
    FLASH_ATTENTION = "day12.flash_attention"
    ROPE = "day14.rope"


KERNELS: Dict[str, object] = {}


def use_kernels(kernels: Dict[str, object]) -> None:
    missing = [d.value for d in Dep if d.value not in kernels]
    if missing:
        raise ValueError(f"use_kernels: no extension for {', '.join(missing)} (got {sorted(kernels)})")
    KERNELS.clear()
    KERNELS.update(kernels)


def _ext(dep: Dep):
    try:
        return KERNELS[dep.value]
    except KeyError:
        raise RuntimeError(f"kernels of {dep.value} not loaded: call use_kernels() first") from None


def _is_bf16(t: Tensor) -> bool:
    return t.dtype is torch.bfloat16


@functools.lru_cache(maxsize=None)
def _decode_workspace_floats(qo_heads: int, head_dim: int, max_splits: int = 1024) -> int:
    """Day 11's split-KV workspace: max_splits partial (o, lse) states per query head."""
    return max_splits * qo_heads * (head_dim + 1)


# --------------------------------------------------------------------------------------------- ops
@custom_op("course::rmsnorm", mutates_args=())
def rmsnorm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    out = torch.empty_like(x)
    k = _ext(Dep.RMSNORM)
    fn = k.rmsnorm_bf16 if _is_bf16(x) else k.rmsnorm_fp16
    fn(out, x, weight, x.shape[0], x.shape[1], eps)
    return out


@custom_op("course::fused_add_rmsnorm", mutates_args=("x", "residual"))
def fused_add_rmsnorm(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> None:
    k = _ext(Dep.FUSED_ADD_RMSNORM)
    fn = k.fused_add_rmsnorm_bf16 if _is_bf16(x) else k.fused_add_rmsnorm_fp16
    fn(x, residual, weight, x.shape[0], x.shape[1], eps)


@custom_op("course::rope", mutates_args=("q", "k"))
def rope(q: Tensor, k: Tensor, positions: Tensor, theta: float) -> None:
    m = _ext(Dep.ROPE)
    fn = m.rope_bf16 if _is_bf16(q) else m.rope_fp16
    fn(q, k, positions, q.shape[0], q.shape[1], k.shape[1], q.shape[2], q.stride(0), k.stride(0), theta)


@custom_op("course::silu_and_mul", mutates_args=())
def silu_and_mul(x: Tensor) -> Tensor:
    tokens, d = x.shape[0], x.shape[1] // 2
    out = x.new_empty(tokens, d)
    k = _ext(Dep.SILU_AND_MUL)
    fn = k.silu_and_mul_bf16 if _is_bf16(x) else k.silu_and_mul_fp16
    fn(out, x, tokens, d)
    return out


@custom_op("course::prefill_attention", mutates_args=())
def prefill_attention(q: Tensor, k: Tensor, v: Tensor, sm_scale: float) -> Tensor:
    b, n, qo, d = q.shape
    o = q.new_empty(b, n, qo, d)
    lse = torch.empty(b, n, qo, dtype=torch.float32, device=q.device)
    m = _ext(Dep.FLASH_ATTENTION)
    fn = m.flash_attention_bf16 if _is_bf16(q) else m.flash_attention_fp16
    fn(o, lse, q, k, v, b, n, n, qo, k.shape[2], d, q.stride(1), k.stride(1), True, sm_scale)
    return o


@custom_op("course::decode_attention", mutates_args=())
def decode_attention(q: Tensor, kv_cache: Tensor, kv_indptr: Tensor, kv_indices: Tensor, kv_last_page_len: Tensor,
                     sm_scale: float) -> Tensor:
    b, qo, d = q.shape
    o = q.new_empty(b, qo, d)
    lse = torch.empty(b, qo, dtype=torch.float32, device=q.device)
    ws = torch.empty(_decode_workspace_floats(qo, d), dtype=torch.float32, device=q.device)
    m = _ext(Dep.BATCH_DECODE)
    fn = m.batch_decode_bf16 if _is_bf16(q) else m.batch_decode_fp16
    fn(o, lse, q, kv_cache, kv_indptr, kv_indices, kv_last_page_len, ws, ws.numel(), b, qo, kv_cache.shape[3], d,
       kv_cache.shape[2], sm_scale)
    return o


@custom_op("course::top_p_sampling", mutates_args=())
def top_p_sampling(probs: Tensor, top_p: Tensor, seed: int, offset: int) -> Tensor:
    tokens = torch.empty(probs.shape[0], dtype=torch.int64, device=probs.device)
    _ext(Dep.TOP_P).top_p_sampling(tokens, probs, top_p, probs.shape[0], probs.shape[1], seed, offset)
    return tokens


# ------------------------------------------------------------------------- fakes (shapes only)
@register_fake("course::rmsnorm")
def _rmsnorm_meta(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    return torch.empty_like(x)


@register_fake("course::fused_add_rmsnorm")
def _fused_add_rmsnorm_meta(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> None:
    return None


@register_fake("course::rope")
def _rope_meta(q: Tensor, k: Tensor, positions: Tensor, theta: float) -> None:
    return None


@register_fake("course::silu_and_mul")
def _silu_and_mul_meta(x: Tensor) -> Tensor:
    return x.new_empty(x.shape[0], x.shape[1] // 2)


@register_fake("course::prefill_attention")
def _prefill_attention_meta(q: Tensor, k: Tensor, v: Tensor, sm_scale: float) -> Tensor:
    return q.new_empty(q.shape)


@register_fake("course::decode_attention")
def _decode_attention_meta(q: Tensor, kv_cache: Tensor, kv_indptr: Tensor, kv_indices: Tensor,
                           kv_last_page_len: Tensor, sm_scale: float) -> Tensor:
    return q.new_empty(q.shape)


@register_fake("course::top_p_sampling")
def _top_p_sampling_meta(probs: Tensor, top_p: Tensor, seed: int, offset: int) -> Tensor:
    return torch.empty(probs.shape[0], dtype=torch.int64, device=probs.device)


# ------------------------------------------------------------------------------------------ model
Planned = collections.namedtuple("Planned", ["positions", "k_rows", "v_rows", "indptr", "indices", "last_page_len"])


class Decoder:
    PREFILL_TOKENS: int = 16384

    def __init__(self, weights: Dict[str, Tensor], cfg: dict, max_batch: int, max_len: int,
                 page_size: int = 16) -> None:
        assert page_size > 0, f"page_size must be positive, got {page_size}"
        self.w = weights
        self.cfg = cfg
        self.ps = page_size
        self.device: torch.device = weights["embed"].device
        self.dtype: torch.dtype = weights["embed"].dtype
        self.max_batch = max_batch
        self.max_len = max_len
        self.pages_per_request = math.ceil(max_len / page_size)
        self.n_layers: int = cfg["layers"]
        self.qo_heads: int = cfg["heads"]
        self.kv_heads: int = cfg["kv_heads"]
        self.head_dim: int = cfg["head_dim"]
        self.sm_scale = 1.0 / math.sqrt(self.head_dim)
        total_pages = max_batch * self.pages_per_request
        self.kv: List[Tensor] = [
            torch.zeros(total_pages, 2, page_size, self.kv_heads, self.head_dim, dtype=self.dtype, device=self.device)
            for _ in range(self.n_layers)]
        self.lens: List[int] = []
        self.batch: int = 0
        self.graph: Optional[torch.cuda.CUDAGraph] = None
        self.static_logits: Optional[Tensor] = None
        # 3 b (positions, K rows, V rows) + b + 1 (indptr) + all pages (indices) + b (last page lengths)
        self.plan_buf = torch.zeros(5 * max_batch + 1 + total_pages, dtype=torch.int64, device=self.device)
        self.static_tokens = torch.zeros(max_batch, dtype=torch.int64, device=self.device)
        eps = cfg["eps"]
        self._norm = functools.partial(torch.ops.course.rmsnorm, eps=eps)
        self._add_norm = functools.partial(torch.ops.course.fused_add_rmsnorm, eps=eps)

    def _weight(self, layer: int, name: str) -> Tensor:
        return self.w[f"layers.{layer}.{name}"]

    # ---------------------------------------------------------------------------- host planning
    def plan(self, lens: Sequence[int]) -> None:
        assert 0 < len(lens) <= self.max_batch, f"{len(lens)} requests, this decoder holds {self.max_batch}"
        assert max(lens) < self.max_len, f"a request with {max(lens)} tokens has no room (max_len {self.max_len})"
        ps, p = self.ps, self.pages_per_request
        used = [n // ps + 1 for n in lens]  # pages each request holds once its new token is in
        k_rows = [(r * p + n // ps) * 2 * ps + n % ps for r, n in enumerate(lens)]
        v_rows = [row + ps for row in k_rows]
        indptr = [0, *itertools.accumulate(used)]
        indices = list(itertools.chain.from_iterable(range(r * p, r * p + u) for r, u in enumerate(used)))
        indices += [0] * (self.max_batch * p - len(indices))
        last = [n + 1 - (u - 1) * ps for n, u in zip(lens, used)]
        host = torch.tensor(list(itertools.chain(lens, k_rows, v_rows, indptr, indices, last)), dtype=torch.int64)
        self.plan_buf[:host.numel()].copy_(host)
        self.batch = len(lens)

    def _planned(self) -> Planned:
        b = self.batch
        pages = self.max_batch * self.pages_per_request
        sizes = [b, b, b, b + 1, pages, b]
        pos, k_rows, v_rows, indptr, indices, last = self.plan_buf[:sum(sizes)].split(sizes)
        return Planned(pos.int(), k_rows, v_rows, indptr.int(), indices.int(), last.int())

    # ----------------------------------------------------------------------------------- layers
    def _attention_inputs(self, i: int, h: Tensor, positions: Tensor):
        qkv = F.linear(h, self._weight(i, "wqkv"))
        t, d = qkv.shape[0], self.head_dim
        q, k, v = qkv.split([self.qo_heads * d, self.kv_heads * d, self.kv_heads * d], dim=1)
        q, k, v = q.view(t, self.qo_heads, d), k.view(t, self.kv_heads, d), v.view(t, self.kv_heads, d)
        torch.ops.course.rope(q, k, positions, self.cfg["rope_theta"])
        return q, k, v

    def _store_kv(self, i: int, k: Tensor, v: Tensor, k_rows: Tensor, v_rows: Tensor) -> None:
        rows = self.kv[i].view(-1, self.kv_heads, self.head_dim)
        rows.index_copy_(0, k_rows, k)
        rows.index_copy_(0, v_rows, v)

    def _feed_forward(self, i: int, h: Tensor, residual: Tensor) -> Tensor:
        self._add_norm(h, residual, self._weight(i, "post_norm"))
        act = torch.ops.course.silu_and_mul(F.linear(h, self._weight(i, "w_gate_up")))
        return F.linear(act, self._weight(i, "w_down"))

    def _pre_attention_norm(self, i: int, h: Tensor, residual: Tensor) -> Tensor:
        if i == 0:
            residual.copy_(h)
            return self._norm(h, self._weight(0, "input_norm"))
        self._add_norm(h, residual, self._weight(i, "input_norm"))
        return h

    def _final_logits(self, h: Tensor, residual: Tensor) -> Tensor:
        self._add_norm(h, residual, self.w["final_norm"])
        return F.linear(h, self.w["lm_head"]).float()

    # ---------------------------------------------------------------------------------- prefill
    def prefill(self, tokens: Tensor) -> Tensor:
        b, n = tokens.shape
        if b > self.max_batch:
            raise ValueError(f"batch of {b} prompts, but max_batch={self.max_batch}")
        if n > self.max_len:
            raise ValueError(f"prompts of {n} tokens, but max_len={self.max_len}")
        self.lens = [0] * b
        chunk = max(1, self.PREFILL_TOKENS // n)
        logits = [self._prefill_chunk(tokens[start:start + chunk], start) for start in range(0, b, chunk)]
        self.lens = [n] * b
        self.batch = b
        return torch.cat(logits)

    def _prefill_chunk(self, tokens: Tensor, first: int) -> Tensor:
        ps, p = self.ps, self.pages_per_request
        b, n = tokens.shape
        qo, kvh, d = self.qo_heads, self.kv_heads, self.head_dim
        positions = torch.arange(n, device=self.device, dtype=torch.int32).repeat(b)
        request = torch.arange(first, first + b, device=self.device).repeat_interleave(n)
        t = positions.long()
        k_rows = (request * p + t // ps) * 2 * ps + t % ps
        h = F.embedding(tokens.reshape(-1), self.w["embed"])
        residual = torch.empty_like(h)
        for i in range(self.n_layers):
            h = self._pre_attention_norm(i, h, residual)
            q, k, v = self._attention_inputs(i, h, positions)
            self._store_kv(i, k, v, k_rows, k_rows + ps)
            o = torch.ops.course.prefill_attention(q.view(b, n, qo, d), k.view(b, n, kvh, d), v.view(b, n, kvh, d),
                                                   self.sm_scale)
            h = self._feed_forward(i, F.linear(o.view(b * n, qo * d), self._weight(i, "wo")), residual)
        last = torch.arange(b, device=self.device) * n + (n - 1)
        return self._final_logits(h[last].contiguous(), residual[last].contiguous())

    # ----------------------------------------------------------------------------------- decode
    def step(self, tokens: Tensor) -> Tensor:
        assert tokens.dim() == 1, f"step takes one token per request, got shape {tuple(tokens.shape)}"
        plan = self._planned()
        h = F.embedding(tokens, self.w["embed"])
        residual = torch.empty_like(h)
        for i in range(self.n_layers):
            h = self._pre_attention_norm(i, h, residual)
            q, k, v = self._attention_inputs(i, h, plan.positions)
            self._store_kv(i, k, v, plan.k_rows, plan.v_rows)
            o = torch.ops.course.decode_attention(q.contiguous(), self.kv[i], plan.indptr, plan.indices,
                                                  plan.last_page_len, self.sm_scale)
            h = self._feed_forward(i, F.linear(o.view(-1, self.qo_heads * self.head_dim), self._weight(i, "wo")),
                                   residual)
        return self._final_logits(h, residual)

    def capture(self) -> None:
        if not self.lens:
            raise RuntimeError("capture() needs a prefilled batch: call prefill() first")
        self.plan(self.lens)
        tokens = self.static_tokens[:self.batch]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            self.step(tokens)  # warm-up outside the capture (cuBLAS chooses its kernels here)
        torch.cuda.current_stream().wait_stream(stream)
        torch._C._cuda_clearCublasWorkspaces()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.static_logits = self.step(tokens)
        self.graph = graph

    def decode(self, tokens: Tensor) -> Tensor:
        if self.graph is None:
            raise RuntimeError("decode() replays the captured step: call capture() first")
        assert tokens.shape[0] == self.batch, f"{tokens.shape[0]} tokens for a batch of {self.batch}"
        self.plan(self.lens)
        self.static_tokens[:self.batch].copy_(tokens)
        self.graph.replay()
        self.lens = [n + 1 for n in self.lens]
        return self.static_logits

    def sample(self, logits: Tensor, top_p: float, seed: int, offset: int) -> Tensor:
        probs = F.softmax(logits.float(), dim=-1)
        top = torch.full((logits.shape[0],), top_p, dtype=torch.float32, device=logits.device)
        return torch.ops.course.top_p_sampling(probs, top, seed, offset)

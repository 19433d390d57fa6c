# CORRECT as graph_runner_class.py, but the static inputs are a torch.nn.Module whose __init__ calls super().__init__() and whose tensors are register_buffer'ed (non-persistent)
# Llama decoder on my kernels (capstone of Day 14).
import math

import torch
import torch.nn.functional as F
from torch import Tensor

KERNELS = {}


def use_kernels(kernels):
    KERNELS.clear()
    KERNELS.update(kernels)


# ------------------------------------------------------------------------------------------ ops
@torch.library.custom_op("course::rmsnorm", mutates_args=())
def rmsnorm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    ext = KERNELS["day06.rmsnorm"]
    out = torch.empty_like(x)
    if x.dtype == torch.bfloat16:
        ext.rmsnorm_bf16(out, x, weight, x.shape[0], x.shape[1], eps)
    else:
        ext.rmsnorm_fp16(out, x, weight, x.shape[0], x.shape[1], eps)
    return out


@rmsnorm.register_fake
def _(x, weight, eps):
    return torch.empty_like(x)


@torch.library.custom_op("course::fused_add_rmsnorm", mutates_args=("x", "residual"))
def fused_add_rmsnorm(x: Tensor, residual: Tensor, weight: Tensor, eps: float) -> None:
    ext = KERNELS["day06.fused_add_rmsnorm"]
    if x.dtype == torch.bfloat16:
        ext.fused_add_rmsnorm_bf16(x, residual, weight, x.shape[0], x.shape[1], eps)
    else:
        ext.fused_add_rmsnorm_fp16(x, residual, weight, x.shape[0], x.shape[1], eps)


@fused_add_rmsnorm.register_fake
def _(x, residual, weight, eps):
    pass


@torch.library.custom_op("course::rope", mutates_args=("q", "k"))
def rope(q: Tensor, k: Tensor, positions: Tensor, theta: float) -> None:
    ext = KERNELS["day14.rope"]
    args = (q, k, positions, q.shape[0], q.shape[1], k.shape[1], q.shape[2], q.stride(0), k.stride(0), theta)
    if q.dtype == torch.bfloat16:
        ext.rope_bf16(*args)
    else:
        ext.rope_fp16(*args)


@rope.register_fake
def _(q, k, positions, theta):
    pass


@torch.library.custom_op("course::silu_and_mul", mutates_args=())
def silu_and_mul(x: Tensor) -> Tensor:
    ext = KERNELS["day02.silu_and_mul"]
    half = x.shape[1] // 2
    out = x.new_empty(x.shape[0], half)
    if x.dtype == torch.bfloat16:
        ext.silu_and_mul_bf16(out, x, x.shape[0], half)
    else:
        ext.silu_and_mul_fp16(out, x, x.shape[0], half)
    return out


@silu_and_mul.register_fake
def _(x):
    return x.new_empty(x.shape[0], x.shape[1] // 2)


@torch.library.custom_op("course::prefill_attention", mutates_args=())
def prefill_attention(q: Tensor, k: Tensor, v: Tensor, sm_scale: float) -> Tensor:
    ext = KERNELS["day12.flash_attention"]
    batch, seq, heads, dim = q.shape
    o = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty(batch, seq, heads, dtype=torch.float32, device=q.device)
    args = (o, lse, q, k, v, batch, seq, seq, heads, k.shape[2], dim, q.stride(1), k.stride(1), True, sm_scale)
    if q.dtype == torch.bfloat16:
        ext.flash_attention_bf16(*args)
    else:
        ext.flash_attention_fp16(*args)
    return o


@prefill_attention.register_fake
def _(q, k, v, sm_scale):
    return q.new_empty(q.shape)


@torch.library.custom_op("course::decode_attention", mutates_args=())
def decode_attention(q: Tensor, kv_cache: Tensor, kv_indptr: Tensor, kv_indices: Tensor, kv_last_page_len: Tensor,
                     sm_scale: float) -> Tensor:
    ext = KERNELS["day11.batch_decode"]
    batch, heads, dim = q.shape
    o = q.new_empty(batch, heads, dim)
    lse = torch.empty(batch, heads, dtype=torch.float32, device=q.device)
    # split-KV scratch for up to 1024 splits; in a graph it is allocated from the graph's pool
    workspace = torch.empty(1024 * heads * (dim + 1), dtype=torch.float32, device=q.device)
    args = (o, lse, q, kv_cache, kv_indptr, kv_indices, kv_last_page_len, workspace, workspace.numel(), batch, heads,
            kv_cache.shape[3], dim, kv_cache.shape[2], sm_scale)
    if q.dtype == torch.bfloat16:
        ext.batch_decode_bf16(*args)
    else:
        ext.batch_decode_fp16(*args)
    return o


@decode_attention.register_fake
def _(q, kv_cache, kv_indptr, kv_indices, kv_last_page_len, sm_scale):
    return q.new_empty(q.shape)


@torch.library.custom_op("course::top_p_sampling", mutates_args=())
def top_p_sampling(probs: Tensor, top_p: Tensor, seed: int, offset: int) -> Tensor:
    out = torch.empty(probs.shape[0], dtype=torch.int64, device=probs.device)
    KERNELS["day08.top_p_sampling"].top_p_sampling(out, probs, top_p, probs.shape[0], probs.shape[1], seed, offset)
    return out


@top_p_sampling.register_fake
def _(probs, top_p, seed, offset):
    return probs.new_empty(probs.shape[0], dtype=torch.int64)


# --------------------------------------------------------------------- static inputs of a graph
class StepInputs(torch.nn.Module):
    """Everything a captured step reads that changes from step to step, at fixed addresses: the tokens,
    the cache rows their K and V go to (int64, for index_copy_), and the page table the attention
    kernel reads with the new tokens' positions (int32, as the kernels take it)."""

    def __init__(self, max_batch, total_pages, device):
        super().__init__()
        self.max_batch, self.total_pages = max_batch, total_pages
        self.register_buffer("tokens", torch.zeros(max_batch, dtype=torch.int64, device=device), persistent=False)
        self.register_buffer("rows", torch.zeros(2 * max_batch, dtype=torch.int64, device=device), persistent=False)
        # positions [b] | indptr [b + 1] | indices [total_pages] | last page lengths [b]
        self.register_buffer("table", torch.zeros(3 * max_batch + 1 + total_pages, dtype=torch.int32, device=device),
                             persistent=False)
        self.batch = 0

    def write(self, k_rows, v_rows, positions, indptr, indices, last):
        self.batch = len(positions)
        rows = torch.tensor(k_rows + v_rows, dtype=torch.int64)
        table = torch.tensor(positions + indptr + indices + last, dtype=torch.int32)
        self.rows[:rows.numel()].copy_(rows)
        self.table[:table.numel()].copy_(table)

    def k_rows(self):
        return self.rows[:self.batch]

    def v_rows(self):
        return self.rows[self.batch:2 * self.batch]

    def page_table(self):
        """(positions, kv_indptr, kv_indices, kv_last_page_len), views of the int32 table."""
        b, pages = self.batch, self.total_pages
        positions = self.table[:b]
        indptr = self.table[b:2 * b + 1]
        indices = self.table[2 * b + 1:2 * b + 1 + pages]
        last = self.table[2 * b + 1 + pages:3 * b + 1 + pages]
        return positions, indptr, indices, last


class GraphRunner:
    """A function of static tensors recorded once into a CUDA graph; replay() reruns it and returns the
    tensor the recording returned (overwritten by every replay)."""

    def __init__(self):
        self.graph = None
        self.output = None

    def capture(self, fn, *args):
        warmup = torch.cuda.Stream()
        warmup.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(warmup):
            fn(*args)  # cuBLAS picks its algorithms and allocates outside the recording
        torch.cuda.current_stream().wait_stream(warmup)
        # a cuBLAS workspace of this graph's own, not one cached for the stream that another graph frees
        torch._C._cuda_clearCublasWorkspaces()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.output = fn(*args)

    def replay(self):
        self.graph.replay()
        return self.output


# ---------------------------------------------------------------------------------------- model
LAYER_WEIGHTS = ("input_norm", "wqkv", "wo", "post_norm", "w_gate_up", "w_down")


class Decoder:
    PREFILL_TOKENS = 16384

    def __init__(self, weights, cfg, max_batch, max_len, page_size=16):
        self.cfg = cfg
        self.ps = page_size
        self.max_batch, self.max_len = max_batch, max_len
        self.embed, self.final_norm, self.lm_head = weights["embed"], weights["final_norm"], weights["lm_head"]
        self.layers = [{name: weights[f"layers.{i}.{name}"] for name in LAYER_WEIGHTS} for i in range(cfg["layers"])]
        self.device, self.dtype = self.embed.device, self.embed.dtype
        self.pages_per_request = (max_len + page_size - 1) // page_size
        total_pages = max_batch * self.pages_per_request
        self.kv = [torch.zeros(total_pages, 2, page_size, cfg["kv_heads"], cfg["head_dim"], dtype=self.dtype,
                               device=self.device) for _ in self.layers]
        self.sm_scale = 1.0 / math.sqrt(cfg["head_dim"])
        self.inputs = StepInputs(max_batch, total_pages, self.device)
        self.runner = GraphRunner()
        self.lens = []
        self.batch = 0

    # --------------------------------------------------------------------------------- planning
    def plan(self, lens):
        ps, per = self.ps, self.pages_per_request
        pages_used = [n // ps + 1 for n in lens]
        k_rows = [(r * per + n // ps) * 2 * ps + n % ps for r, n in enumerate(lens)]
        v_rows = [row + ps for row in k_rows]
        indptr = [0]
        for used in pages_used:
            indptr.append(indptr[-1] + used)
        indices = [r * per + j for r, used in enumerate(pages_used) for j in range(used)]
        indices += [0] * (self.inputs.total_pages - len(indices))
        last = [n + 1 - (used - 1) * ps for n, used in zip(lens, pages_used)]
        self.inputs.write(k_rows, v_rows, list(lens), indptr, indices, last)
        self.batch = len(lens)

    # ----------------------------------------------------------------------------------- layers
    def _layer(self, layer, h, residual, first, positions, write_kv, attend):
        """One decoder layer on h [tokens, hidden]; returns the MLP's output (the next residual add is
        the next layer's, or the final norm's). `write_kv(k, v)` stores the tokens' K and V,
        `attend(q, k, v)` returns the attention output [tokens, heads, head_dim]."""
        c = self.cfg
        heads, kv_heads, d = c["heads"], c["kv_heads"], c["head_dim"]
        if first:
            residual = h
            h = rmsnorm(h, layer["input_norm"], c["eps"])
        else:
            fused_add_rmsnorm(h, residual, layer["input_norm"], c["eps"])
        qkv = F.linear(h, layer["wqkv"])
        t = qkv.shape[0]
        q = qkv[:, :heads * d].view(t, heads, d)
        k = qkv[:, heads * d:(heads + kv_heads) * d].view(t, kv_heads, d)
        v = qkv[:, (heads + kv_heads) * d:].view(t, kv_heads, d)
        rope(q, k, positions, c["rope_theta"])
        write_kv(k, v)
        o = attend(q, k, v)
        h = F.linear(o.reshape(t, heads * d), layer["wo"])
        fused_add_rmsnorm(h, residual, layer["post_norm"], c["eps"])
        h = F.linear(silu_and_mul(F.linear(h, layer["w_gate_up"])), layer["w_down"])
        return h, residual

    def _store(self, i, k, v, k_rows, v_rows):
        cache = self.kv[i].view(-1, self.cfg["kv_heads"], self.cfg["head_dim"])
        cache.index_copy_(0, k_rows, k)
        cache.index_copy_(0, v_rows, v)

    def _head(self, h, residual):
        fused_add_rmsnorm(h, residual, self.final_norm, self.cfg["eps"])
        return F.linear(h, self.lm_head).float()

    # ---------------------------------------------------------------------------------- prefill
    def prefill(self, tokens):
        b, n = tokens.shape
        assert b <= self.max_batch and n <= self.max_len
        self.lens = [0] * b
        chunk = max(1, self.PREFILL_TOKENS // n)
        parts = []
        for start in range(0, b, chunk):
            parts.append(self._prefill(tokens[start:start + chunk], start))
        self.lens = [n] * b
        self.batch = b
        return torch.cat(parts)

    def _prefill(self, tokens, first_request):
        c, ps, per = self.cfg, self.ps, self.pages_per_request
        b, n = tokens.shape
        positions = torch.arange(n, device=self.device, dtype=torch.int32).repeat(b)
        requests = torch.arange(first_request, first_request + b, device=self.device).repeat_interleave(n)
        pos64 = positions.long()
        k_rows = (requests * per + pos64 // ps) * 2 * ps + pos64 % ps
        v_rows = k_rows + ps

        def attend(q, k, v):
            return prefill_attention(q.view(b, n, c["heads"], c["head_dim"]), k.view(b, n, c["kv_heads"], c["head_dim"]),
                                     v.view(b, n, c["kv_heads"], c["head_dim"]), self.sm_scale)

        h = F.embedding(tokens.reshape(-1), self.embed)
        residual = None
        for i, layer in enumerate(self.layers):
            h, residual = self._layer(layer, h, residual, i == 0, positions,
                                      lambda k, v, i=i: self._store(i, k, v, k_rows, v_rows), attend)
        last = torch.arange(b, device=self.device) * n + n - 1
        return self._head(h[last].contiguous(), residual[last].contiguous())

    # ----------------------------------------------------------------------------------- decode
    def step(self, tokens):
        k_rows, v_rows = self.inputs.k_rows(), self.inputs.v_rows()
        positions, indptr, indices, last = self.inputs.page_table()
        h = F.embedding(tokens, self.embed)
        residual = None
        for i, layer in enumerate(self.layers):
            h, residual = self._layer(
                layer, h, residual, i == 0, positions,
                lambda k, v, i=i: self._store(i, k, v, k_rows, v_rows),
                lambda q, k, v, i=i: decode_attention(q.contiguous(), self.kv[i], indptr, indices, last,
                                                      self.sm_scale))
        return self._head(h, residual)

    def capture(self):
        self.plan(self.lens)
        self.runner.capture(self.step, self.inputs.tokens[:self.batch])

    def decode(self, tokens):
        self.plan(self.lens)
        self.inputs.tokens[:self.batch].copy_(tokens)
        logits = self.runner.replay()
        self.lens = [n + 1 for n in self.lens]
        return logits

    def sample(self, logits, top_p, seed, offset):
        probs = torch.softmax(logits.float(), dim=-1)
        return top_p_sampling(probs, torch.full((logits.shape[0],), top_p, dtype=torch.float32, device=logits.device),
                              seed, offset)

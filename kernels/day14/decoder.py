# Your exercise: fill in the TODOs (about 64 lines). Generated from solutions/day14/decoder.py by `grader release` (stub-hash 73ae4ebf55e1).
# Day 14 capstone: a Llama-architecture decoder that runs on your kernels.
#
# Your kernels of Days 2, 6, 8, 11, 12 and 14 become torch.library custom ops (namespace `course`),
# each with a fake implementation, so that torch.compile can trace a model that calls them without
# running them. The model is Llama's: token embedding; per layer RMSNorm -> fused qkv projection ->
# RoPE -> attention (prefill: Day 12's causal flash attention; decode: Day 11's paged decode
# attention) -> output projection -> fused residual add + RMSNorm -> gate/up projection -> SiLU-and-
# mul -> down projection; a final norm and the vocabulary projection. Matrix multiplications are
# cuBLAS's (F.linear), as in every serving engine.
#
# A decode step is ~20 launches per layer of a few microseconds each; launched one by one from
# Python it is CPU-bound. `capture` records one step into a CUDA graph; `decode` replays it. Replay
# needs every tensor the step reads at the same address every time (static buffers), and the step
# may not decide anything on the host: what changes per step (the tokens' positions, where their K
# and V go, the page table of the attention kernel) is computed on the host by `plan` and copied
# into static buffers before the replay, as FlashInfer's wrappers plan() before run().
#
# Napkin math (Llama 3 8B's layers, 2 of them, vocabulary 32000, bf16): the weights are 2 x 436 MB
# plus the 262 MB vocabulary projection: 1.13 GB read per decode step, ~0.27 ms at an H200's 4.2 TB/s, and
# at batch 64 with 4096 tokens of context 2 x 1.07 GB of KV cache on top (~0.8 ms at 0.72x copy).
import math

import torch
import torch.nn.functional as F
from torch import Tensor

# Your built kernels, by exercise id ("day06.rmsnorm": the extension built from
# kernels/day06/rmsnorm.cu, ...): set by use_kernels() before any op runs.
KERNELS = {}


def use_kernels(kernels):
    """The grader (or the notebook) hands over your built extensions, by exercise id."""
    KERNELS.clear()
    KERNELS.update(kernels)


def _bf16(t):
    return t.dtype == torch.bfloat16


# --------------------------------------------------------------------------------------------- ops
# Each op: the real implementation (allocates its outputs, calls your kernel on the current
# stream) and a fake one (only shapes and dtypes: what torch.compile and opcheck trace with).
# `mutates_args` names every input an op writes: the schema then says so (Tensor(a!)), and
# torch.compile orders the op correctly with the reads and writes around it.

@torch.library.custom_op("course::rmsnorm", mutates_args=())
def rmsnorm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """out = x * rsqrt(mean(x^2) + eps) * weight, rows of x [tokens, hidden] (Day 6)."""
    out = torch.empty_like(x)
    k = KERNELS["day06.rmsnorm"]
    (k.rmsnorm_bf16 if _bf16(x) else k.rmsnorm_fp16)(out, x, weight, x.shape[0], x.shape[1], eps)
    return out


@rmsnorm.register_fake
def _(x, weight, eps):
    return torch.empty_like(x)


@torch.library.custom_op("course::rope", mutates_args=("q", "k"))
def rope(q: Tensor, k: Tensor, positions: Tensor, theta: float) -> None:
    """q [tokens, qo_heads, d] and k [tokens, kv_heads, d] rotated in place (today's kernel); their
    rows may be slices of one fused qkv (the strides say how far apart)."""
    m = KERNELS["day14.rope"]
    (m.rope_bf16 if _bf16(q) else m.rope_fp16)(q, k, positions, q.shape[0], q.shape[1], k.shape[1], q.shape[2],
                                               q.stride(0), k.stride(0), theta)


@rope.register_fake
def _(q, k, positions, theta):
    return None


@torch.library.custom_op("course::silu_and_mul", mutates_args=())
def silu_and_mul(x: Tensor) -> Tensor:
    """[tokens, 2 d] -> [tokens, d]: silu(gate) * up (Day 2)."""
    out = x.new_empty(x.shape[0], x.shape[1] // 2)
    k = KERNELS["day02.silu_and_mul"]
    (k.silu_and_mul_bf16 if _bf16(x) else k.silu_and_mul_fp16)(out, x, x.shape[0], x.shape[1] // 2)
    return out


@silu_and_mul.register_fake
def _(x):
    return x.new_empty(x.shape[0], x.shape[1] // 2)


@torch.library.custom_op("course::prefill_attention", mutates_args=())
def prefill_attention(q: Tensor, k: Tensor, v: Tensor, sm_scale: float) -> Tensor:
    """Causal attention of q [batch, seq, qo_heads, d] on k, v [batch, seq, kv_heads, d] (Day 12);
    q, k, v may be strided slices of one fused qkv."""
    b, n, qo, d = q.shape
    o = q.new_empty(b, n, qo, d)
    lse = torch.empty(b, n, qo, dtype=torch.float32, device=q.device)
    m = KERNELS["day12.flash_attention"]
    (m.flash_attention_bf16 if _bf16(q) else m.flash_attention_fp16)(
        o, lse, q, k, v, b, n, n, qo, k.shape[2], d, q.stride(1), k.stride(1), True, sm_scale)
    return o


@prefill_attention.register_fake
def _(q, k, v, sm_scale):
    return q.new_empty(q.shape)


# TODO: register the last three ops the same way, each with its fake implementation
# (grader/exercises/day14.py, OPS, lists their schemas):
#   course::fused_add_rmsnorm(Tensor(a!) x, Tensor(b!) residual, Tensor weight, float eps) -> ()
#       in place: mutates_args names what it writes, and it returns nothing
#   course::decode_attention(Tensor q, Tensor kv_cache, Tensor kv_indptr, Tensor kv_indices,
#                            Tensor kv_last_page_len, float sm_scale) -> Tensor
#       Day 11's kernel; its split-KV workspace allocated inside the op (in a CUDA graph it comes
#       from the graph's pool, at the same address on every replay)
#   course::top_p_sampling(Tensor probs, Tensor top_p, SymInt seed, SymInt offset) -> Tensor  (int in Python)


# ------------------------------------------------------------------------------------------- model
class Decoder:
    """A Llama model on your kernels. `weights`: grader/exercises/day14.py's names (embed, lm_head,
    final_norm, and per layer i: layers.i.input_norm, .wqkv [(qo + 2 kv) d, hidden], .wo, .post_norm,
    .w_gate_up [2 intermediate, hidden], .w_down); `cfg`: hidden, heads, kv_heads, head_dim,
    intermediate, vocab, layers, rope_theta, eps. Everything is allocated on the weights' device (meta
    tensors too: then nothing runs, and torch.compile can still trace `step`)."""

    PREFILL_TOKENS = 16384  # requests prefilled together, at most this many tokens at once

    def __init__(self, weights, cfg, max_batch, max_len, page_size=16):
        self.w, self.cfg, self.ps = weights, cfg, page_size
        self.device = weights["embed"].device
        self.dtype = weights["embed"].dtype
        self.max_batch, self.max_len = max_batch, max_len
        self.pages_per_request = -(-max_len // page_size)
        kvh, d = cfg["kv_heads"], cfg["head_dim"]
        # Paged KV cache, one per layer: [pages, 2 (K, V), page_size, kv_heads, head_dim]; request b
        # owns pages b * pages_per_request .. (b + 1) * pages_per_request - 1.
        pages = max_batch * self.pages_per_request
        self.kv = [torch.zeros(pages, 2, page_size, kvh, d, dtype=self.dtype, device=self.device)
                   for _ in range(cfg["layers"])]
        self.lens = []          # tokens in the cache, per request (the host knows them: no sync)
        self.graph = None
        self.sm_scale = 1.0 / math.sqrt(d)
        # The static buffers a captured step reads, filled by plan(): one int64 buffer, one copy per step.
        b, p = max_batch, self.pages_per_request
        self.plan_buf = torch.zeros(3 * b + (b + 1) + b * p + b, dtype=torch.int64, device=self.device)
        self.static_tokens = torch.zeros(max_batch, dtype=torch.int64, device=self.device)

    # ---------------------------------------------------------------- plan (host) and its buffers
    def plan(self, lens):
        """The host side of one decode step for requests with `lens` tokens in the cache: each new
        token's position and the cache rows of its K and V; the attention's page table after the
        append (FlashInfer's kv_indptr, kv_indices, kv_last_page_len). One copy into plan_buf."""
        b, p, ps = len(lens), self.pages_per_request, self.ps
        positions, k_rows, indptr, indices, last = [], [], [0], [], []
        for r, n in enumerate(lens):
            page = r * p + n // ps
            positions.append(n)
            k_rows.append(page * 2 * ps + n % ps)        # row of the flat [pages * 2 * ps] view
            used = n // ps + 1                           # pages holding n + 1 tokens
            indptr.append(indptr[-1] + used)
            indices += [r * p + j for j in range(used)]
            last.append(n + 1 - (used - 1) * ps)
        indices += [0] * (self.max_batch * p - len(indices))
        host = torch.tensor(positions + k_rows + [x + ps for x in k_rows] + indptr + indices + last, dtype=torch.int64)
        self.plan_buf[:host.numel()].copy_(host)
        self.batch = b

    def _planned(self):
        """Views of plan_buf for a batch of self.batch requests: (positions int32, k_rows, v_rows,
        kv_indptr int32, kv_indices int32, kv_last_page_len int32)."""
        b, total = self.batch, self.max_batch * self.pages_per_request
        buf = self.plan_buf
        pos, k_rows, v_rows = buf[:b], buf[b:2 * b], buf[2 * b:3 * b]
        indptr = buf[3 * b:4 * b + 1]
        indices = buf[4 * b + 1:4 * b + 1 + total]
        last = buf[4 * b + 1 + total:4 * b + 1 + total + b]
        return pos.int(), k_rows, v_rows, indptr.int(), indices.int(), last.int()

    # ----------------------------------------------------------------------------------- layers
    def _qkv(self, i, h, positions):
        """The fused qkv projection of normed h [tokens, hidden], RoPE applied in place: q, k, v views."""
        c = self.cfg
        qo, kvh, d = c["heads"], c["kv_heads"], c["head_dim"]
        qkv = F.linear(h, self.w[f"layers.{i}.wqkv"])                  # [tokens, (qo + 2 kv) d]
        t = qkv.shape[0]
        q = qkv[:, :qo * d].view(t, qo, d)
        k = qkv[:, qo * d:(qo + kvh) * d].view(t, kvh, d)
        v = qkv[:, (qo + kvh) * d:].view(t, kvh, d)
        torch.ops.course.rope(q, k, positions, c["rope_theta"])
        return q, k, v

    def _append(self, i, k, v, k_rows, v_rows):
        """K and V of the new tokens into layer i's cache rows (index_copy_: no host decision)."""
        flat = self.kv[i].view(-1, self.cfg["kv_heads"], self.cfg["head_dim"])
        flat.index_copy_(0, k_rows, k)
        flat.index_copy_(0, v_rows, v)

    def _mlp(self, i, h, residual):
        """Attention output h: residual add + norm, gate/up, SiLU-and-mul, down."""
        torch.ops.course.fused_add_rmsnorm(h, residual, self.w[f"layers.{i}.post_norm"], self.cfg["eps"])
        act = torch.ops.course.silu_and_mul(F.linear(h, self.w[f"layers.{i}.w_gate_up"]))
        return F.linear(act, self.w[f"layers.{i}.w_down"])

    def _norm_in(self, i, h, residual):
        """The layer's input norm: plain RMSNorm on the embeddings (layer 0), else fused with the residual add."""
        w = self.w[f"layers.{i}.input_norm"]
        if i == 0:  # a Python branch on the layer number, not on a tensor: fine in a graph
            residual.copy_(h)
            return torch.ops.course.rmsnorm(h, w, self.cfg["eps"])
        torch.ops.course.fused_add_rmsnorm(h, residual, w, self.cfg["eps"])
        return h

    def _logits(self, h, residual):
        torch.ops.course.fused_add_rmsnorm(h, residual, self.w["final_norm"], self.cfg["eps"])
        return F.linear(h, self.w["lm_head"]).float()

    # ---------------------------------------------------------------------------------- prefill
    def prefill(self, tokens):
        """Prompts tokens [batch, n] (equal lengths) into an empty cache; the logits [batch, vocab]
        (fp32) of each prompt's last token. Eager: run once per prompt, not worth a graph."""
        b, n = tokens.shape
        assert b <= self.max_batch and n <= self.max_len
        self.lens = [0] * b
        chunk = max(1, self.PREFILL_TOKENS // n)
        out = [self._prefill_chunk(tokens[r:r + chunk], r) for r in range(0, b, chunk)]
        self.lens = [n] * b
        self.batch = b
        return torch.cat(out)

    def _prefill_chunk(self, tokens, first):
        c, ps, p = self.cfg, self.ps, self.pages_per_request
        b, n = tokens.shape
        qo, kvh, d = c["heads"], c["kv_heads"], c["head_dim"]
        pos = torch.arange(n, device=self.device, dtype=torch.int32).repeat(b)      # [b n]
        req = torch.arange(first, first + b, device=self.device).repeat_interleave(n)
        t = pos.long()
        k_rows = (req * p + t // ps) * 2 * ps + t % ps
        h = F.embedding(tokens.reshape(-1), self.w["embed"])                        # [b n, hidden]
        residual = torch.empty_like(h)
        for i in range(c["layers"]):
            h = self._norm_in(i, h, residual)
            q, k, v = self._qkv(i, h, pos)
            self._append(i, k, v, k_rows, k_rows + ps)
            o = torch.ops.course.prefill_attention(q.view(b, n, qo, d), k.view(b, n, kvh, d), v.view(b, n, kvh, d),
                                                   self.sm_scale)
            h = self._mlp(i, F.linear(o.view(b * n, qo * d), self.w[f"layers.{i}.wo"]), residual)
        last = torch.arange(b, device=self.device) * n + n - 1                       # each prompt's last token
        return self._logits(h[last].contiguous(), residual[last].contiguous())

    # ----------------------------------------------------------------------------------- decode
    def step(self, tokens):
        """One decode step for tokens [batch] (one new token per request) as planned by plan():
        logits [batch, vocab] fp32. Only tensor work, no host decision: CUDA-graph capturable, and
        torch.compile(fullgraph=True) traces it without a break."""
        # TODO: the layers for one token per request, as _prefill_chunk does for prompts, with
        # the planned buffers (self._planned()) instead of host-computed ones, and Day 11's
        # paged attention (torch.ops.course.decode_attention) over the cache after the append.
        raise NotImplementedError("Decoder.step")

    def capture(self):
        """Record step() into a CUDA graph for the current batch (after prefill). The step's inputs
        are static buffers: static_tokens (copied into by decode) and plan_buf (by plan)."""
        # TODO: plan(self.lens); warm step(self.static_tokens[:self.batch]) up once on a side
        # stream; torch._C._cuda_clearCublasWorkspaces() (rule 4 of the notebook); then
        # self.graph = torch.cuda.CUDAGraph() and record step into self.static_logits with
        # torch.cuda.graph(self.graph).
        raise NotImplementedError("Decoder.capture")

    def decode(self, tokens):
        """One step for tokens [batch]: plan, copy the tokens into the static input, replay. Returns
        the static logits buffer: the next decode overwrites it (clone what you keep)."""
        # TODO: plan for the current lengths, copy tokens into the captured input, replay, then
        # count the new token in self.lens.
        raise NotImplementedError("Decoder.decode")

    def sample(self, logits, top_p, seed, offset):
        """Next tokens [batch] drawn from softmax(logits) within each row's top_p nucleus (Day 8)."""
        probs = torch.softmax(logits.float(), dim=-1)
        top = torch.full((logits.shape[0],), top_p, dtype=torch.float32, device=logits.device)
        return torch.ops.course.top_p_sampling(probs, top, seed, offset)

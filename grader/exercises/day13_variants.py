"""Day 13's attention variants: Day 12's FlashAttention-2 kernel as a Jinja2 template
(kernels/day13/attention_variant.cu.j2) with a variant rendered into it, a registry of built kernels
keyed by configuration, and the PyTorch reference of each variant.

A variant is what FlashInfer's include/flashinfer/attention/variants.cuh calls a variant: a struct
built once per block (its per-head state) with two hooks the kernel calls on every score,
LogitsTransform (here `logits`) and LogitsMask (`mask`). Its run-time parameters (a cap, slopes, a
window) are arguments of the entry point; everything else is rendered into the source as a constant.

Not graded: the notebook's section and tests/test_day13_attention_variant.py use it.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, fields
from typing import Callable

from .. import paths
from ..spec import Tolerance, attention_tolerance

TEMPLATE_NAME = "attention_variant.cu.j2"
DTYPES = ("fp16", "bf16")
HEAD_DIMS = (64, 128)
TANH_APPROX = 2.0 ** -11  # tanh.approx.f32's relative error (kernels/include/course/math.cuh)


def template_path():
    return paths.KERNELS / "day13" / TEMPLATE_NAME


# ---------------------------------------------------------------------------- the variants
@dataclass(frozen=True)
class AttentionVariant:
    """One variant: the C++ the template renders (declarations and expressions) and its PyTorch reference.
    x is the logit sm_scale q.k; qo a query's position among the keys (i + seq_kv - seq_q); kv a key's."""
    name: str
    about: str
    args: tuple[str, ...] = ()   # the entry point's extra run-time arguments, e.g. "float logits_soft_cap"
    state: str = ""              # the struct's per-block fields
    init: str = ""               # statements that set them from `args` and `qo_head`, once per block
    logits: str = ""             # the logits hook, a float expression of x, qo, kv ("": none, x as is)
    mask: str = ""               # the mask hook, a bool expression of qo, kv ("": none)
    check: str = ""              # what the launcher requires of `args` (else cudaErrorInvalidValue)
    causal_only: str = ""        # why the variant is registered only with the causal mask ("": not so)
    reference_logits: Callable | None = None  # torch: (x [b, h, i, j], pos [i, 1], key [1, j], **args)
    reference_mask: Callable | None = None    # torch: (pos, key, **args) -> bool [i, j]

    @property
    def arg_names(self) -> tuple[str, ...]:
        return tuple(a.split()[-1].lstrip("*") for a in self.args)

    def context(self) -> dict:
        """What the template sees of it: the C++ fields and the argument names."""
        c = {f.name: getattr(self, f.name) for f in fields(self)
             if not f.name.startswith("reference") and f.name != "causal_only"}
        return {**c, "args": list(self.args), "arg_names": list(self.arg_names)}


def _soft_cap(x, pos, key, logits_soft_cap):
    import torch

    return logits_soft_cap * torch.tanh(x / logits_soft_cap)


def _alibi(x, pos, key, alibi_slopes):
    return x + alibi_slopes.view(1, -1, 1, 1) * (key - pos).to(x.dtype)


def _window(pos, key, window_left):
    return key >= pos - window_left


PLAIN = AttentionVariant("plain", "softmax(sm_scale q k^T): Day 12's kernel, no hook")
SOFT_CAP = AttentionVariant(
    "soft_cap", "Gemma 2's logit soft-capping: cap tanh(x / cap) bends the logits into (-cap, cap)",
    args=("float logits_soft_cap",), state="float cap, inv_cap;",
    init="cap = args.logits_soft_cap;\n    inv_cap = 1.0f / args.logits_soft_cap;",
    logits="cap * variant_tanh(x * inv_cap)", check="args.logits_soft_cap > 0.0f", reference_logits=_soft_cap)
ALIBI = AttentionVariant(
    "alibi", "ALiBi (BLOOM, MPT): a linear bias slope_h (kv - qo) per query head instead of position embeddings",
    args=("const float* alibi_slopes",), state="float slope;", init="slope = args.alibi_slopes[qo_head];",
    logits="x + slope * static_cast<float>(kv - qo)", check="args.alibi_slopes != nullptr", reference_logits=_alibi)
SLIDING_WINDOW = AttentionVariant(
    "sliding_window", "a sliding window (Mistral, Gemma 2's local layers): qo sees the keys from qo - window_left on",
    args=("int window_left",), state="int window_left;", init="window_left = args.window_left;",
    mask="kv >= qo - window_left", check="args.window_left >= 0", reference_mask=_window,
    causal_only="a window bounded on the left only is a causal model's; without the causal mask the hook's "
                "query positions stay live on every tile, and at 255 registers the kernel spills")
VARIANTS = {v.name: v for v in (PLAIN, SOFT_CAP, ALIBI, SLIDING_WINDOW)}


def alibi_slopes(qo_heads: int, device="cuda"):
    """The ALiBi paper's slopes for a power-of-two number of heads: 2^(-8 h / n) for h = 1 .. n, fp32."""
    import torch

    return torch.tensor([2.0 ** (-8.0 * h / qo_heads) for h in range(1, qo_heads + 1)], device=device)


# ---------------------------------------------------------------------------- configurations
@dataclass(frozen=True)
class AttentionConfig:
    """A registry key: everything compile-time about one kernel. swizzle and fast_tanh are ablation
    switches: each turns one optimization off so that its worth can be measured."""
    variant: str
    dtype: str = "bf16"
    head_dim: int = 128
    causal: bool = False
    swizzle: bool = True
    fast_tanh: bool = True

    @property
    def entry_point(self) -> str:
        return f"attention_{self.variant}_{self.dtype}"

    @property
    def variant_label(self) -> str:
        """The variant and the ablation switches turned off: 'soft_cap, no fast_tanh'."""
        return self.variant + "".join(f", no {name}" for name in ("swizzle", "fast_tanh") if not getattr(self, name))

    @property
    def label(self) -> str:
        mask = "causal" if self.causal else "full"
        return self.variant_label.replace(self.variant, f"{self.variant}, {self.dtype}, d {self.head_dim}, {mask}", 1)

    @property
    def file_name(self) -> str:
        flags = "".join(f"_no_{name}" for name in ("swizzle", "fast_tanh") if not getattr(self, name))
        return f"{self.entry_point}_d{self.head_dim}_{'causal' if self.causal else 'full'}{flags}.cu"


def render(config: AttentionConfig, template_text: str | None = None) -> str:
    """The .cu source of one configuration (the course's Jinja2 environment, in this process: the
    template is the course's own, not a learner's)."""
    from .day13 import jinja_environment

    if config.variant not in VARIANTS:
        raise KeyError(f"no attention variant '{config.variant}'; there are {', '.join(VARIANTS)}")
    text = template_text if template_text is not None else template_path().read_text()
    context = {k: v for k, v in asdict(config).items() if k != "variant"}
    return jinja_environment().from_string(text).render(variant=VARIANTS[config.variant].context(), **context)


def source(config: AttentionConfig, template_text: str | None = None):
    """The rendering as a grader.jit.Source, named after its configuration."""
    from ..jit import Source

    return Source(f"kernels/day13/{config.file_name}", render(config, template_text))


# ---------------------------------------------------------------------------- the registry
class NotRegistered(LookupError):
    """A configuration no kernel is registered for."""


@dataclass
class Request:
    """One request to the registry: the built module and what it cost."""
    config: AttentionConfig
    module: object
    seconds: float
    cached: bool   # found in the build cache (the content hash of the rendered text, flags, toolchain)


class KernelRegistry:
    """Configurations -> kernels built from the template, as a launch API keeps them: a table of the
    instantiated configurations, each built on first use (the course's JIT: the content-hash cache,
    so a configuration built before, in any process, is a look-up) and dispatched by key. A key that
    was never registered is refused with the keys there are, not compiled on the fly."""

    def __init__(self, configs=(), template_text: str | None = None):
        self.template_text = template_text if template_text is not None else template_path().read_text()
        self._configs: list[AttentionConfig] = []
        self._modules: dict[AttentionConfig, object] = {}
        for c in configs:
            self.register(c)

    def register(self, config: AttentionConfig) -> None:
        if config.variant not in VARIANTS or config.dtype not in DTYPES or config.head_dim not in HEAD_DIMS:
            raise ValueError(f"cannot register ({config.label}): variants {', '.join(VARIANTS)}, dtypes "
                             f"{', '.join(DTYPES)}, head dims {', '.join(map(str, HEAD_DIMS))}")
        if VARIANTS[config.variant].causal_only and not config.causal:
            raise ValueError(f"cannot register ({config.label}): {config.variant} is registered causal only: "
                             + VARIANTS[config.variant].causal_only)
        if config not in self._configs:
            self._configs.append(config)

    def __contains__(self, config) -> bool:
        return config in self._configs

    def __iter__(self):
        return iter(self._configs)

    def __len__(self) -> int:
        return len(self._configs)

    def lookup(self, config: AttentionConfig) -> AttentionConfig:
        """`config` if registered; else NotRegistered, naming what is."""
        if config in self._configs:
            return config
        near = [c for c in self._configs if c.variant == config.variant] or self._configs
        raise NotRegistered(f"no kernel registered for ({config.label}); registered: "
                            + ("; ".join(f"({c.label})" for c in near) or "none"))

    def build(self, config: AttentionConfig, load: bool = True) -> Request:
        """Render and build a registered configuration through grader.jit.build (its cache decides:
        a hash it has built before is loaded, not compiled). Loaded modules are kept for dispatch."""
        from ..jit import build

        self.lookup(config)
        t0 = time.perf_counter()
        built = build([source(config, self.template_text)], name=f"day13_{config.entry_point}", quiet=True, load=load)
        if load:
            self._modules[config] = built
        return Request(config, built, time.perf_counter() - t0, built.cached)

    def attention(self, q, k, v, *, variant: str = "plain", causal: bool = False, swizzle: bool = True,
                  fast_tanh: bool = True, sm_scale: float | None = None, **variant_args):
        """o, lse of q [batch, seq_q, qo_heads, d] on k, v [batch, seq_kv, kv_heads, d]: the key is read
        off the call (d and the dtype from q), looked up, built if it is not yet, and launched."""
        import torch

        dtype = {torch.float16: "fp16", torch.bfloat16: "bf16"}.get(q.dtype, str(q.dtype))
        config = self.lookup(AttentionConfig(variant, dtype, q.shape[-1], causal, swizzle, fast_tanh))
        if config not in self._modules:
            self.build(config)
        wanted = VARIANTS[variant].arg_names
        if set(variant_args) != set(wanted):
            raise TypeError(f"variant '{variant}' takes {', '.join(wanted) or 'no arguments'}, "
                            f"got {', '.join(variant_args) or 'none'}")
        b, sq, qo, hd = q.shape
        o = torch.empty(b, sq, qo, hd, dtype=q.dtype, device=q.device)
        lse = torch.empty(b, sq, qo, dtype=torch.float32, device=q.device)
        scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(hd)
        getattr(self._modules[config], config.entry_point)(
            o, lse, q, k, v, b, sq, k.shape[1], qo, k.shape[2], q.stride(1), k.stride(1), scale,
            *(variant_args[n] for n in wanted))
        return o, lse


# ---------------------------------------------------------------------------- reference and tolerance
def reference(q, k, v, *, variant: str = "plain", causal: bool = False, sm_scale: float | None = None,
              **variant_args):
    """o [b, seq_q, qo_heads, d] and lse [b, seq_q, qo_heads] in fp32 from the same fp16/bf16 inputs:
    logits x = sm_scale q.k, the variant's transform, the causal mask (bottom-right) and its mask, then
    softmax. A row with no key it may attend: o = 0, lse = -inf (Day 12's convention)."""
    import torch

    var = VARIANTS[variant]
    b, sq, qo, hd = q.shape
    skv, group = k.shape[1], qo // k.shape[2]
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(hd)
    kf, vf = (t.float().repeat_interleave(group, dim=2) for t in (k, v))   # (b, skv, qo, d): GQA
    x = torch.einsum("bihd,bjhd->bhij", q.float(), kf) * scale              # (b, qo, sq, skv)
    pos = torch.arange(sq, device=q.device)[:, None] + (skv - sq)          # query positions among the keys
    key = torch.arange(skv, device=q.device)[None, :]
    logits = var.reference_logits(x, pos, key, **variant_args) if var.reference_logits else x
    allowed = key <= pos if causal else torch.ones(sq, skv, dtype=torch.bool, device=q.device)
    if var.reference_mask:
        allowed = allowed & var.reference_mask(pos, key, **variant_args)
    logits = logits.masked_fill(~allowed, -math.inf)
    lse = torch.logsumexp(logits, dim=-1)                                   # (b, qo, sq); -inf: no key
    w = torch.exp(logits - torch.where(torch.isinf(lse), 0.0, lse)[..., None])
    return torch.einsum("bhij,bjhd->bihd", w, vf), lse.permute(0, 2, 1)


def tolerance(config: AttentionConfig, seq_kv: int, score_max: float = 64.0, v_scale: float = 1.0,
              **variant_args) -> Tolerance:
    """Day 12's attention tolerance (grader/spec.py: P and o rounded, fp32 accumulation, lse), plus
    for the soft cap with tanh.approx its 2^-11 relative error: a logit cap tanh(x / cap) errs by up to
    2^-11 min(cap, |x|), which moves lse by as much and o by twice that of max |v|."""
    tol = attention_tolerance(config.dtype, seq_kv, v_scale, score_max)
    if config.variant != "soft_cap" or not config.fast_tanh:
        return tol
    logit_err = TANH_APPROX * min(variant_args.get("logits_soft_cap", score_max), score_max)
    return Tolerance(tol.rtol, tol.atol + 2 * logit_err * v_scale,
                     tol.why + f"; tanh.approx: 2^-11 of logits up to {min(variant_args.get('logits_soft_cap', score_max), score_max):g}")


def max_excess(out, ref, tol: Tolerance) -> float:
    """The largest |out - ref| - (atol + rtol |ref|) over the elements (<= 0: within the tolerance);
    -inf where ref is -inf must be -inf in out too (else +inf)."""
    import torch

    out, ref = out.float(), ref.float()
    both_inf = torch.isinf(ref) & (out == ref)
    bound = tol.atol + tol.rtol * torch.where(torch.isinf(ref), 0.0, ref.abs())
    diff = torch.where(both_inf, 0.0, (out - ref).abs() - bound)
    return torch.where(torch.isnan(diff), math.inf, diff).max().item()

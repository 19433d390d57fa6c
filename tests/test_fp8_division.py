"""The division trick of solutions/day10/fp8_quantize.cu (div_by_scale): x / scale from a reciprocal
r = RN(1/scale), q0 = RN(x r), the exact residual e = x - q0 scale (one FMA) and RN(q0 + e r)
(Markstein's theorem), checked against IEEE division where it matters: the e4m3 byte, for scales
the kernel computes (max(RN(amax / 448), MIN_SCALE)) and every x with |x| <= amax.

fp32 arithmetic is emulated in fp64: products of two fp32 values are exact there, the residual is
exactly representable in fp32, and rounding an fp64 sum or quotient to fp32 gives the correctly
rounded fp32 result (fp64's 53 bits >= 2 x 24 + 2: double rounding is innocuous). The committed
comment's figure (2.07 billion pairs, every amax) came from the same check over every amax; this
test runs a sample of amax values of both types on every CI run."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

MIN_SCALE = np.float32(1.0) / np.float32(448.0 * 512.0)


def _all_finite(dtype: str) -> np.ndarray:
    if dtype == "bf16":
        x = (np.arange(65536, dtype=np.uint32) << 16).view(np.float32)
    else:
        x = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
    return x[np.isfinite(x)]


def _rn32(a):
    return np.asarray(a, dtype=np.float64).astype(np.float32)


def _e4m3(q: np.ndarray) -> np.ndarray:
    return torch.from_numpy(q).to(torch.float8_e4m3fn).view(torch.uint8).numpy()


def div_by_scale(x: np.ndarray, scale: np.float32) -> np.ndarray:
    """The kernel's div_by_scale, operation by operation, in emulated fp32."""
    s = np.float64(scale)
    r = np.float64(_rn32(1.0 / s))                          # __frcp_rn(scale)
    q0 = _rn32(x.astype(np.float64) * r)                    # x * r
    e = _rn32(x.astype(np.float64) - q0.astype(np.float64) * s)  # fmaf(-q0, scale, x)
    return np.copysign(_rn32(q0.astype(np.float64) + e.astype(np.float64) * r), x)  # copysignf(fmaf(e, r, q0), x)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_div_by_scale_gives_the_e4m3_bytes_of_ieee_division(dtype):
    xs = _all_finite(dtype)
    amaxes = np.unique(np.abs(xs))
    rng = np.random.default_rng(0)
    # a sample of every magnitude: the smallest and largest amax, zero (MIN_SCALE), and random ones
    picks = np.concatenate([amaxes[:20], amaxes[-20:], rng.choice(amaxes, 160, replace=False)])
    checked = 0
    for amax in picks:
        scale = np.maximum(_rn32(np.float64(amax) / 448.0), MIN_SCALE)
        x = xs[np.abs(xs) <= amax]
        ieee = _rn32(x.astype(np.float64) / np.float64(scale))
        ours = div_by_scale(x, scale)
        bad = np.flatnonzero(_e4m3(ours) != _e4m3(ieee))
        assert bad.size == 0, (f"{dtype} amax {amax}: x {x[bad[:3]]}, x / scale {ieee[bad[:3]]}, "
                               f"div_by_scale {ours[bad[:3]]}")
        checked += x.size
    assert checked > 1_000_000


def test_the_check_can_fail():
    # Without the residual step, x * RN(1/scale) rounds differently for about 1 pair in 25,000: the
    # same comparison finds such pairs for about one amax in eight.
    xs = _all_finite("bf16")
    amaxes = np.unique(np.abs(xs))
    fails = 0
    for amax in np.random.default_rng(1).choice(amaxes[amaxes > 0], 100, replace=False):
        scale = np.maximum(_rn32(np.float64(amax) / 448.0), MIN_SCALE)
        x = xs[np.abs(xs) <= amax]
        quick = _rn32(x.astype(np.float64) * np.float64(_rn32(1.0 / np.float64(scale))))
        fails += int((_e4m3(quick) != _e4m3(_rn32(x.astype(np.float64) / np.float64(scale)))).sum())
    assert fails > 0

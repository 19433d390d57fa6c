"""What the exercises' tolerances are built from: the rounding an exercise allows, stated once.

Not an exercise module (no EXERCISES): helpers for grader/exercises/dayNN.py.
"""
from __future__ import annotations

import math

ULP32 = 2.0 ** -24           # fp32 unit roundoff: one correctly rounded fp32 operation errs by <= this
FP16_SUBNORMAL = 2.0 ** -25  # half the spacing of fp16 subnormals (2^-24): rounding below 6.1e-5 errs by <= this
FLUSH32 = 2.0 ** -126        # the smallest normal fp32: .ftz instructions (ex2.approx inside __expf) flush below it


def expf_ulp(t: float) -> float:
    """__expf(x)'s documented error, in fp32 ulp, for |x| <= t (CUDA C Programming Guide,
    intrinsic functions: 2 + floor(1.173 |x|))."""
    return 2.0 + 1.173 * t


def round_up(x: float, digits: int = 3) -> float:
    """x rounded up to `digits` significant digits: a readable tolerance never below its bound."""
    if x <= 0:
        return x
    step = 10.0 ** (math.floor(math.log10(x)) - digits + 1)
    return float(f"{math.ceil(x / step - 1e-9) * step:.{digits + 1}g}")


class PerOutput(dict):
    """A tolerance per output name, where one exercise's outputs need different ones (the
    worker accepts a dict); `why` joins their reasons, for whoever reads one `why`."""

    @property
    def why(self) -> str:
        return "; ".join(f"{name}: {tol.why}" for name, tol in self.items())

"""Guard bytes around each output: a store past the end of an output (or before its start) fails.

The allocator rounds every tensor up (to 512 bytes, and carves small ones out of larger blocks), so
a kernel that stores a whole 16-byte vector at a row's tail without its guard, or one element at
i == n, writes into bytes that belong to no tensor the grader compares: the outputs still match, and
compute-sanitizer's memcheck sees it only with the caching allocator off, on the small cases it
runs. Here every output the grader allocates sits in a buffer of its own with GUARD_BYTES of poison
before and after it, at the same address modulo 512 as the spec gave it (a misaligned case stays
misaligned); after each call the guards must be as they were.
"""
from __future__ import annotations

GUARD_BYTES = 512  # before and after each output: a multiple of the allocator's alignment


class Outputs(dict):
    """The outputs of a call (name -> tensor), with the guards of those the grader allocated."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.guards: dict[str, Guard] = {}


class Guard:
    """The poisoned elements around one output (compared bit for bit: NaN is a value here), and what
    they held before the call."""

    def __init__(self, name: str, bits, pre: int, size: int):
        self.name, self.bits, self.pre, self.size = name, bits, pre, size  # (pre and size in elements)
        self.before = bits[:pre].clone(), bits[pre + size:].clone()

    def damage(self) -> str | None:
        """What the call wrote outside its output, or None."""
        import torch

        said = []
        after = torch.nonzero(self.bits[self.pre + self.size:] != self.before[1]).flatten()
        if after.numel():
            said.append(f"{_elements(after.numel())} past its end (the farthest {int(after[-1]) + 1} after it)")
        before = torch.nonzero(self.bits[:self.pre] != self.before[0]).flatten()
        if before.numel():
            said.append(f"{_elements(before.numel())} before its start (the farthest {self.pre - int(before[0])} "
                        f"before it)")
        if not said:
            return None
        return (f"{self.name}: the call wrote outside the output: " + " and ".join(said) + ". They belong to no "
                "element (in a real program, to the next tensor): is a store missing its tail guard, or a vector "
                "stored whole at the end of a row?")


def _elements(n: int) -> str:
    return f"{n} element" + ("" if n == 1 else "s")


_BITS = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}  # an integer view of each element size


def guarded(name: str, t, poison) -> tuple[object, Guard | None]:
    """`t`'s shape and dtype in a buffer of its own with guards around it, `poison`ed whole (the
    output and its guards); `t` itself where it is not contiguous (left as it is)."""
    import torch

    item = t.element_size()
    if not t.is_contiguous() or t.numel() == 0 or item not in _BITS:
        return t, None
    buf = torch.empty((3 * GUARD_BYTES) // item + t.numel(), dtype=t.dtype, device=t.device)
    # the output starts at the address the spec gave it modulo GUARD_BYTES (a misaligned case's offset
    # kept), with at least GUARD_BYTES before it and after it
    pre = GUARD_BYTES + (t.data_ptr() - buf.data_ptr()) % GUARD_BYTES
    if pre % item:
        return t, None
    poison(buf)
    pre //= item
    out = buf[pre: pre + t.numel()].view(t.shape)
    return out, Guard(name, buf.view(getattr(torch, _BITS[item])), pre, t.numel())


def guard_outputs(outputs: dict, poison) -> Outputs:
    """Every output moved into a guarded buffer, and `poison`ed: the buffer whole (the output and its
    guards), or the output itself where it cannot be guarded."""
    guarded_outputs = Outputs()
    for name, t in outputs.items():
        guarded_outputs[name], g = guarded(name, t, poison)
        if g is None:
            poison(t)
        else:
            guarded_outputs.guards[name] = g
    return guarded_outputs


def damage(outputs) -> list[str]:
    """What the last call wrote outside the guarded outputs (an empty list: nothing)."""
    return [m for g in getattr(outputs, "guards", {}).values() for m in [g.damage()] if m]

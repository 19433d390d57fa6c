"""Shared memory filled with NaN before each untimed call, so that a kernel reading shared memory it
never wrote (a tail chunk not zero-filled, a buffer read before its first store, a block reduction
reading the partials of warps the block does not have) gets garbage, every time.

Without it, what such a read sees depends on what ran before: often the same kernel's own earlier
values (right by accident), or zeros after the GPU switched to another process's context (NVIDIA GPUs
clear shared memory between contexts), which is what a kernel that forgot to zero-fill wanted. Never
right before a timing: the poison asks for the largest shared-memory carveout. Not under
compute-sanitizer, which checks the learner's accesses itself.

The kernel is PTX, loaded through the CUDA driver (ptx.py) and launched on the current stream right before the
learner's call: one 1024-thread block per SM (or more), each with the most dynamic shared memory a
block may have, writing 0x7fff7fff (NaN as fp32, as fp16 and as bf16) over all of it.
"""
from __future__ import annotations

import ctypes

from .ptx import DriverKernel

PATTERN = 0x7FFF7FFF
_PTX = r"""
.version 8.0
.target sm_90
.address_size 64
.extern .shared .align 16 .b8 course_poison_smem[];
.visible .entry course_poison_shared(.param .u32 course_poison_bytes)
{
  .reg .pred %p;
  .reg .b32 %r<6>;
  ld.param.u32 %r1, [course_poison_bytes];
  mov.u32 %r2, %tid.x;
  shl.b32 %r2, %r2, 4;
  mov.u32 %r3, course_poison_smem;
  mov.u32 %r4, 0x7fff7fff;
LOOP:
  setp.ge.u32 %p, %r2, %r1;
  @%p bra DONE;
  add.u32 %r5, %r3, %r2;
  st.shared.v4.u32 [%r5], {%r4, %r4, %r4, %r4};
  add.u32 %r2, %r2, 16384;
  bra LOOP;
DONE:
  ret;
}
"""
THREADS = 1024
# CUDA driver enums
_ATTR_MAX_SHARED_OPTIN = 97            # CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
_ATTR_SMS = 16                         # CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
_FUNC_MAX_DYNAMIC_SHARED = 8           # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
_FUNC_CARVEOUT = 9                     # CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT


class SharedMemoryPoison:
    """`poison(stream)` before a call; `why_not` says why it cannot run here (then it does nothing)."""

    def __init__(self):
        self.why_not: str | None = None
        self._kernel = None
        try:
            self._setup()
        except Exception as e:  # (a driver without these calls, a PTX the driver refuses)
            self.why_not = f"{type(e).__name__}: {e}"

    def _setup(self) -> None:
        import torch

        kernel = DriverKernel(_PTX, "course_poison_shared")
        optin, sms = kernel.device_attribute(_ATTR_MAX_SHARED_OPTIN), kernel.device_attribute(_ATTR_SMS)
        kernel.check(kernel.lib.cuFuncSetAttribute(kernel.fn, _FUNC_MAX_DYNAMIC_SHARED, optin), "cuFuncSetAttribute")
        kernel.check(kernel.lib.cuFuncSetAttribute(kernel.fn, _FUNC_CARVEOUT, 100), "cuFuncSetAttribute")
        self.bytes, self.blocks = optin, 2 * sms
        self._params = kernel.params(ctypes.c_uint32(self.bytes))
        self._kernel, self._torch = kernel, torch

    def poison(self, stream=None) -> None:
        """Every SM's shared memory set to the pattern, on `stream` (default: torch's current one),
        before what is queued there next."""
        if self._kernel is None:
            return
        handle = (stream or self._torch.cuda.current_stream()).cuda_stream
        self._kernel.launch(self.blocks, THREADS, self.bytes, handle, self._params)

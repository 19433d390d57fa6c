"""The grader's own small kernels, written in PTX and loaded through the CUDA driver (ctypes on libcuda:
the driver compiles each once per process, so the grading process needs no nvcc): the shared-memory
poison (poison.py) and the side stream's busy wait (`spin`).
"""
from __future__ import annotations

import ctypes

# The side-stream case's busy wait: `ns` nanoseconds of %globaltimer, one clock for the whole GPU.
# torch.cuda._sleep counts cycles of clock64, a counter of each SM's own; a spin preempted for another
# process's kernels may resume on another SM (PTX's %smid "may change ... following preemption") whose
# counter is behind, and spin on for seconds: beside other gradings the side-stream case was stopped as
# a hang at 10 s, the solution's too (reports/class-benchmark-84-lanes4-2gpu-93786bc-solution-stopped-as-hang.log).
SPIN_PTX = r"""
.version 7.0
.target sm_70
.address_size 64
.visible .entry course_spin_ns(.param .u64 course_spin_ns_param)
{
  .reg .pred %p;
  .reg .b64 %rd<5>;
  ld.param.u64 %rd1, [course_spin_ns_param];
  mov.u64 %rd2, %globaltimer;
SPIN:
  mov.u64 %rd3, %globaltimer;
  sub.s64 %rd4, %rd3, %rd2;
  setp.lt.s64 %p, %rd4, %rd1;
  @%p bra SPIN;
  ret;
}
"""


class DriverKernel:
    """One `.entry` of a PTX module, loaded into torch's CUDA context (made here if not yet)."""

    def __init__(self, ptx: str, name: str):
        import torch

        torch.zeros(1, device="cuda")  # torch's context made and current in this thread
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.module, self.fn = ctypes.c_void_p(), ctypes.c_void_p()
        self.check(self.lib.cuModuleLoadData(ctypes.byref(self.module), ctypes.c_char_p(ptx.encode())),
                   "cuModuleLoadData")
        self.check(self.lib.cuModuleGetFunction(ctypes.byref(self.fn), self.module, name.encode()),
                   "cuModuleGetFunction")

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(rc, ctypes.byref(name))
            raise RuntimeError(f"{what} failed: {name.value.decode() if name.value else rc}")

    def device_attribute(self, attribute: int) -> int:
        dev, value = ctypes.c_int(), ctypes.c_int()
        self.check(self.lib.cuCtxGetDevice(ctypes.byref(dev)), "cuCtxGetDevice (torch's context)")
        self.check(self.lib.cuDeviceGetAttribute(ctypes.byref(value), attribute, dev), "cuDeviceGetAttribute")
        return value.value

    def params(self, *args) -> ctypes.Array:
        """The kernel's arguments (ctypes values, kept alive by the array's owner) for launch()."""
        array = (ctypes.c_void_p * len(args))(*(ctypes.cast(ctypes.byref(a), ctypes.c_void_p) for a in args))
        array._keep = args
        return array

    def launch(self, blocks: int, threads: int, shared_bytes: int, stream_handle: int, params) -> None:
        self.check(self.lib.cuLaunchKernel(self.fn, blocks, 1, 1, threads, 1, 1, shared_bytes,
                                           ctypes.c_void_p(stream_handle), params, None), "cuLaunchKernel")


_SPIN: DriverKernel | None | bool = None


def spin(ns: int, stream) -> None:
    """`stream` (a torch.cuda.Stream) kept busy for `ns` nanoseconds of the GPU's global clock, before
    whatever is queued on it next. Where the driver refuses the PTX, torch.cuda._sleep (~2 cycles a ns)."""
    global _SPIN
    if _SPIN is None:
        try:
            _SPIN = DriverKernel(SPIN_PTX, "course_spin_ns")
        except Exception:
            _SPIN = False
    if _SPIN:
        _SPIN.launch(1, 1, 0, stream.cuda_stream, _SPIN.params(ctypes.c_uint64(ns)))
    else:
        import torch

        with torch.cuda.stream(stream):
            torch.cuda._sleep(2 * ns)


# The read ceiling: every 16-byte word of a buffer loaded once, streaming (ld.global.cs: evict first),
# UNROLL independent loads in flight per thread, grid-stride over a grid of a few blocks per SM; the
# words are xor-ed together and stored only if they equal `magic` (never, in practice), so that no
# load is dead code and the kernel writes nothing. benchmarks/read_ceiling shows it running at the
# bandwidth a device copy reaches with its reads and writes counted.
def read_ptx(unroll: int) -> str:
    loads, xors, addr = [], [], "%rd11"
    for u in range(unroll):
        regs = ", ".join(f"%r{10 + 4 * u + j}" for j in range(4))
        if u:
            loads.append(f"  add.u64 %rd{11 + u}, %rd{10 + u}, %rd9;")
            addr = f"%rd{11 + u}"
        loads.append(f"  ld.global.cs.v4.u32 {{{regs}}}, [{addr}];")
        xors += [f"  xor.b32 %r2, %r2, %r{10 + 4 * u + j};" for j in range(4)]
    body = "\n".join(loads + xors)
    return f"""
.version 7.0
.target sm_70
.address_size 64
.visible .entry course_read(.param .u64 p_src, .param .u64 p_words, .param .u64 p_sink, .param .u32 p_magic)
{{
  .reg .pred %p<4>;
  .reg .b32 %r<{10 + 4 * unroll}>;
  .reg .b64 %rd<{12 + unroll}>;
  ld.param.u64 %rd1, [p_src];
  ld.param.u64 %rd2, [p_words];
  ld.param.u64 %rd3, [p_sink];
  ld.param.u32 %r1, [p_magic];
  mov.u32 %r2, 0;
  mov.u32 %r3, %ctaid.x;
  mov.u32 %r4, %ntid.x;
  mov.u32 %r5, %tid.x;
  mov.u32 %r6, %nctaid.x;
  mul.wide.u32 %rd4, %r3, %r4;
  cvt.u64.u32 %rd5, %r5;
  add.u64 %rd4, %rd4, %rd5;
  mul.wide.u32 %rd6, %r6, %r4;
  mul.lo.u64 %rd7, %rd6, {unroll};
  mul.lo.u64 %rd8, %rd6, {unroll - 1};
  shl.b64 %rd9, %rd6, 4;
MAIN:
  add.u64 %rd10, %rd4, %rd8;
  setp.ge.u64 %p1, %rd10, %rd2;
  @%p1 bra TAIL;
  shl.b64 %rd10, %rd4, 4;
  add.u64 %rd11, %rd1, %rd10;
{body}
  add.u64 %rd4, %rd4, %rd7;
  bra MAIN;
TAIL:
  setp.ge.u64 %p2, %rd4, %rd2;
  @%p2 bra DONE;
  shl.b64 %rd10, %rd4, 4;
  add.u64 %rd11, %rd1, %rd10;
  ld.global.cs.v4.u32 {{%r10, %r11, %r12, %r13}}, [%rd11];
  xor.b32 %r2, %r2, %r10;
  xor.b32 %r2, %r2, %r11;
  xor.b32 %r2, %r2, %r12;
  xor.b32 %r2, %r2, %r13;
  add.u64 %rd4, %rd4, %rd6;
  bra TAIL;
DONE:
  setp.ne.u32 %p3, %r2, %r1;
  @%p3 bra END;
  st.global.u32 [%rd3], %r2;
END:
  ret;
}}
"""


# The read ceiling's shape: 16-byte loads in flight per thread, threads per block, blocks per SM.
READ_UNROLL, READ_THREADS, READ_BLOCKS_PER_SM = 4, 256, 8


class StreamingRead:
    """Reads `nbytes` (rounded up to 16) of its own buffer with the read-ceiling kernel on the current
    stream: the speed of light of a kernel that must read that many bytes and write next to nothing."""

    def __init__(self, nbytes: int, unroll: int = READ_UNROLL, threads: int = READ_THREADS,
                 blocks_per_sm: int = READ_BLOCKS_PER_SM, buffer=None):
        import torch

        self.kernel = DriverKernel(read_ptx(unroll), "course_read")
        self.words = (int(nbytes) + 15) // 16
        self.buf = buffer if buffer is not None else torch.empty(self.words * 16, dtype=torch.uint8, device="cuda")
        self.sink = torch.zeros(1, dtype=torch.int32, device="cuda")
        sms = self.kernel.device_attribute(16)  # CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
        self.threads = threads
        self.blocks = max(1, min(blocks_per_sm * sms, (self.words + threads - 1) // threads))
        self.args = self.kernel.params(ctypes.c_uint64(self.buf.data_ptr()), ctypes.c_uint64(self.words),
                                       ctypes.c_uint64(self.sink.data_ptr()), ctypes.c_uint32(0x5EED1E55))

    @property
    def nbytes(self) -> int:
        return self.words * 16

    def __call__(self) -> None:
        import torch

        self.kernel.launch(self.blocks, self.threads, 0, torch.cuda.current_stream().cuda_stream, self.args)

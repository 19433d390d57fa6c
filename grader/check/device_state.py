"""A kernel file's own device memory, put back as it was loaded before every timed call.

Between timed calls the inputs change and the outputs are poisoned (timed.py), but a kernel that kept
what an earlier call computed (results cached under a fingerprint of the inputs, a call counter that
makes every other call skip half the blocks) could still replay it. The only place a file can keep
anything between calls is its own variables: `__device__` and `__constant__` ones (allocations,
runtime copies into buffers, memory the host can reach and `__managed__` variables are refused by the
link check). Their bytes as the module loaded them are copied aside before the module's first call
and copied back before each timed call, so that to the kernel every timed call is its first.

Finding them: the runtime gives the kernel handle of a host stub (cudaGetFuncBySymbol; stubs are
among the extension's functions, read from its symbol table), the driver gives that kernel's module
(cuFuncGetModule) and each variable's address by its name in the cubin (cuModuleGetGlobal). The driver
places each variable where it likes (the code reaches them through relocations it resolves at load time),
so a variable it does not find by its name is placed from its offset in the cubin only where every named
variable of its section sits at the same distance from its own offset.
"""
from __future__ import annotations

import ctypes
import os
from collections import defaultdict
from dataclasses import dataclass

from .worker_config import DeviceVariable


ZEROED = ".nv.global"  # the section of the variables without an initialiser (zeros as loaded)


class DeviceStateError(RuntimeError):
    """The file's variables could not be found, so they cannot be put back between timed calls."""


@dataclass
class _Region:
    address: int
    size: int
    loaded: object  # their contents as loaded (a device tensor)


class DeviceState:
    """The variables of the extension at `library` (DeviceVariable, from its cubin), found and their
    loaded contents copied aside; `restore()` copies them back (on torch's current stream). The copies are
    the driver's (cuMemcpyDtoDAsync): the variables' memory is the module's, which torch does not know."""

    def __init__(self, library: str, variables: list[DeviceVariable]):
        import torch

        self.variables = list(variables)
        addresses = _addresses(library, self.variables)
        self._copy = _driver_copy()
        # Nothing has run yet, so every zero-initialised variable reads zeros: where one does not, an
        # address is wrong, and nothing is written there.
        for v, address in addresses.items():
            if v.section == ZEROED and v.size:
                seen = torch.empty(v.size, dtype=torch.uint8, device="cuda")
                self._copy(seen.data_ptr(), address, v.size, v.name)
                if torch.count_nonzero(seen):
                    raise DeviceStateError(f"{v.name} does not read as zeros before the first call: its address is wrong")
        self.regions = []
        # One copy per variable: variables next to each other in memory may lie in two of the driver's
        # allocations (a section each), and one copy may not span two.
        for v, address in sorted(addresses.items(), key=lambda item: item[1]):
            if v.size:
                loaded = torch.empty(v.size, dtype=torch.uint8, device="cuda")
                self._copy(loaded.data_ptr(), address, v.size, v.name)
                self.regions.append(_Region(address, v.size, loaded))
        self.restore()  # (a first write of the same bytes: a region that cannot be written fails here, not when timed)
        torch.cuda.synchronize()

    @property
    def bytes(self) -> int:
        return sum(r.size for r in self.regions)

    def restore(self) -> None:
        for r in self.regions:
            self._copy(r.address, r.loaded.data_ptr(), r.size, f"{r.size} bytes back to {r.address:#x}")


def _driver_copy():
    """copy(dst, src, size, what): device bytes copied by the driver on torch's current stream; a CUDA error
    raises DeviceStateError naming `what`."""
    import torch

    drv = _loaded("libcuda.so")
    fn = drv.cuMemcpyDtoDAsync_v2
    fn.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]

    def copy(dst: int, src: int, size: int, what: str) -> None:
        rc = fn(dst, src, size, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        if rc != 0:
            raise DeviceStateError(f"copying {what}: CUDA driver error {rc}")
    return copy


def _addresses(library: str, variables: list[DeviceVariable]) -> dict[DeviceVariable, int]:
    """Each variable's device address in the module the extension at `library` loaded."""
    module = _module_of(library)
    drv = _loaded("libcuda.so")
    get = drv.cuModuleGetGlobal_v2
    get.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p,
                    ctypes.c_char_p]
    named: dict[DeviceVariable, int] = {}
    for v in variables:
        address, size = ctypes.c_uint64(), ctypes.c_size_t()
        if get(ctypes.byref(address), ctypes.byref(size), module, v.name.encode()) == 0 and address.value:
            named[v] = address.value
    return placed(variables, named)


def placed(variables: list[DeviceVariable], named: dict[DeviceVariable, int]) -> dict[DeviceVariable, int]:
    """Every variable's address: those the driver named (`named`) where it said; each other one at its
    cubin offset from its section's base, where the named variables of that section agree on one."""
    found = dict(named)
    bases: dict[str, set[int]] = defaultdict(set)
    for v, address in named.items():
        bases[v.section].add(address - v.offset)
    for v in variables:
        if v not in found:
            if len(bases[v.section]) != 1:
                raise DeviceStateError(f"the driver does not know the variable {v.name} ({v.section}) by its name, "
                                       "and the section's other variables give no one place for it")
            found[v] = next(iter(bases[v.section])) + v.offset
    return found


def host_functions(library: str) -> tuple[str, int, list[int]]:
    """From the extension's symbol table: its module's entry (PyInit_...), that entry's offset, and the
    offsets of its functions (the kernels' host stubs among them), local ones first."""
    from ..jit.symbols import STT_FUNC, read_object

    obj = read_object(library, relocations=False)
    defined = [s for s in obj.symbols if s.shndx and s.name]
    init = next((s for s in defined if s.name.startswith("PyInit_")), None)
    if init is None:
        raise DeviceStateError(f"{library} has no symbol table with its module's entry")
    return init.name, init.value, [s.value for s in defined if s.type == STT_FUNC]


def _module_of(library: str) -> ctypes.c_void_p:
    """The CUDA module of the extension at `library`: a kernel's host stub, found among its functions,
    gives its kernel handle and that handle its module."""
    init, init_offset, functions = host_functions(library)
    lib = ctypes.CDLL(library, mode=os.RTLD_NOLOAD)  # (it is loaded: the grading process imported it)
    bias = ctypes.cast(getattr(lib, init), ctypes.c_void_p).value - init_offset
    rt = _loaded("libcudart.so")
    rt.cudaGetFuncBySymbol.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    kernel = ctypes.c_void_p()
    for offset in functions:
        if rt.cudaGetFuncBySymbol(ctypes.byref(kernel), ctypes.c_void_p(bias + offset)) == 0:
            break
    else:
        raise DeviceStateError(f"no kernel of {library} is known to the CUDA runtime")
    rt.cudaGetLastError()  # (the functions that were no kernel each left an error)
    drv = _loaded("libcuda.so")
    drv.cuFuncGetModule.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    module = ctypes.c_void_p()
    if drv.cuFuncGetModule(ctypes.byref(module), kernel) != 0 or not module.value:
        raise DeviceStateError("the CUDA driver gave no module for the file's kernel")
    return module


def _loaded(stem: str) -> ctypes.CDLL:
    """The library `stem` (libcuda.so, libcudart.so) that this process has loaded: the one that
    registered the extension's kernels."""
    paths = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if os.path.basename(path).startswith(stem) and path not in paths:
                    paths.append(path)
    except OSError:
        pass
    for path in paths + [f"{stem}.{v}" for v in (1, 13, 12)]:  # (then by soname, where /proc is not mounted)
        try:
            return ctypes.CDLL(path, mode=os.RTLD_NOLOAD)
        except OSError:
            continue
    raise DeviceStateError(f"{stem} is not loaded in this process")

"""Read a kernel file's entry points and write the torch binding for them.

A course `.cu` file never includes torch: it marks each host function that Python
may call with `COURSE_EXPORT` (FlashInfer's layering: kernel and launcher in
framework-free CUDA, binding elsewhere). This module parses those prototypes
once and generates the pybind11 binding that load_inline compiles with g++.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# pointee type -> (torch dtype in C++, torch dtype name in Python), by the type's canonical name
# (canonical_type: `half`, `__half` are one type, as are `int64_t` and `long`)
POINTER_DTYPES = {
    "float": ("at::kFloat", "float32"),
    "double": ("at::kDouble", "float64"),
    "__half": ("at::kHalf", "float16"),
    "__nv_bfloat16": ("at::kBFloat16", "bfloat16"),
    "signed char": ("at::kChar", "int8"),      # int8_t
    "unsigned char": ("at::kByte", "uint8"),   # uint8_t
    "short": ("at::kShort", "int16"),          # int16_t
    "int": ("at::kInt", "int32"),              # int32_t
    "unsigned int": ("at::kUInt32", "uint32"),  # uint32_t
    "long": ("at::kLong", "int64"),            # int64_t
    "bool": ("at::kBool", "bool"),
    "void": (None, "any"),
}
# scalar parameter type (canonical) -> type of the binding's argument
SCALARS = {
    "int": "int64_t", "unsigned int": "int64_t", "long": "int64_t", "unsigned long": "int64_t",
    "float": "double", "double": "double", "bool": "bool",
}
RETURNS = {"cudaError_t", "void", "int", "int64_t", "float", "double", "bool"}

# Other spellings of one C++ type on the course's platform (Linux x86-64: LP64, glibc's <cstdint>,
# cuda_fp16.h's `typedef __half half`, cuda_bf16.h's `typedef __nv_bfloat16 nv_bfloat16`). An entry
# point may spell a type any of these ways, as the compiler (and the binding's declaration of it) does.
# `long long` is not here: it has the width of int64_t but is another type (int64_t is `long`).
SAME_TYPE = {
    "half": "__half", "nv_bfloat16": "__nv_bfloat16",
    "signed": "int", "signed int": "int", "int32_t": "int",
    "unsigned": "unsigned int", "uint32_t": "unsigned int",
    "long int": "long", "signed long": "long", "signed long int": "long", "int64_t": "long",
    "unsigned long int": "unsigned long", "uint64_t": "unsigned long", "size_t": "unsigned long",
    "long long int": "long long", "signed long long": "long long", "signed long long int": "long long",
    "unsigned long long int": "unsigned long long",
    "short int": "short", "signed short": "short", "signed short int": "short", "int16_t": "short",
    "unsigned short int": "unsigned short", "uint16_t": "unsigned short",
    "int8_t": "signed char", "uint8_t": "unsigned char",
}
_STD_NAMES = {"int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t", "uint32_t", "int64_t", "uint64_t", "size_t"}
# The stream: cudaStream_t is `struct CUstream_st*` (driver_types.h)
STREAM_POINTEES = {"CUstream_st", "struct CUstream_st"}
_KEYWORDS = {"int", "long", "short", "unsigned", "signed", "char", "float", "double", "bool", "void", "const",
             "struct", "__restrict__", "restrict"}


def canonical_type(spelled: str) -> str:
    """The one name of a type spelled `spelled` (no const, no pointer): 'std::int64_t' and
    'int64_t' -> 'long', 'half' -> '__half', 'unsigned' -> 'unsigned int'; others as they are."""
    name = " ".join(spelled.split())
    if name.startswith("std::") and name[5:] in _STD_NAMES:
        name = name[5:]
    return SAME_TYPE.get(name, name)


def _spelled_as(canonical: str) -> str:
    """How the fixed entry points spell a canonical type, for messages ('long' -> 'int64_t')."""
    preferred = {"long": "int64_t", "int": "int32_t or int", "signed char": "int8_t", "unsigned char": "uint8_t",
                 "unsigned int": "uint32_t", "unsigned long": "size_t", "short": "int16_t"}
    return preferred.get(canonical, canonical)


_EXPORT_RE = re.compile(r"\bCOURSE_EXPORT\s+([A-Za-z_][\w:]*(?:\s*\*+)?)\s*\b([A-Za-z_]\w*)\s*\(([^)]*)\)", re.S)


class ExportError(ValueError):
    """An entry point the course's binding cannot call; the message says why."""


@dataclass(frozen=True)
class Param:
    ctype: str  # as written, normalised spaces: "const __half*"
    name: str
    kind: str  # "pointer", "scalar" or "stream"
    base: str  # pointee or scalar type without const, as written: "half"
    type: str = ""  # base's canonical name (canonical_type): "__half"; "cudaStream_t" for the stream

    @property
    def const_pointee(self) -> bool:
        """A pointer to const (`const T*` or `T const*`; not `T* const`, a const pointer)."""
        return self.kind == "pointer" and "const" in self.ctype.split("*")[0].split()

    def signature(self) -> str:
        return f"{self.ctype} {self.name}"


@dataclass(frozen=True)
class Export:
    name: str
    returns: str
    params: tuple[Param, ...]
    line: int

    def prototype(self) -> str:
        return f"{self.returns} {self.name}({', '.join(p.signature() for p in self.params)})"

    def python_signature(self) -> str:
        """What a learner calls from Python: tensors for pointers, no stream."""
        py = {"int64_t": "int", "double": "float", "bool": "bool"}
        args = [f"{p.name}: Tensor[{POINTER_DTYPES[p.type][1]}]" if p.kind == "pointer"
                else f"{p.name}: {py[SCALARS[p.type]]}" for p in self.params if p.kind != "stream"]
        return f"{self.name}({', '.join(args)})"


def _strip_comments(text: str) -> str:
    """Remove // and /* */ comments, keeping line breaks so line numbers hold."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def _parse_param(raw: str, where: str) -> Param:
    raw = raw.split("=", 1)[0]  # a default value (`cudaStream_t stream = nullptr`): the binding passes every argument
    raw = " ".join(raw.replace("*", " * ").split())
    bare = " ".join(w for w in raw.replace("*", " ").split() if w not in ("const", "__restrict__", "restrict"))
    if canonical_type(bare) in POINTER_DTYPES or canonical_type(bare) in SCALARS or bare == "cudaStream_t" \
            or bare in STREAM_POINTEES or canonical_type(bare) == "long long":
        raise ExportError(f"{where}: the parameter '{raw}' has no name; give every parameter a name")
    m = re.fullmatch(r"(.+?)\s*([A-Za-z_]\w*)", raw)
    if not m or m.group(2) in _KEYWORDS:
        raise ExportError(f"{where}: cannot read the parameter '{raw}'; give every parameter a name")
    ctype, name = m.group(1).replace(" *", "*").strip(), m.group(2)
    words = [w for w in ctype.replace("*", " ").split() if w not in ("const", "__restrict__", "restrict")]
    base = " ".join(words)
    canonical = canonical_type(base)
    if ctype.count("*") == 1 and base in STREAM_POINTEES:  # cudaStream_t spelled out
        return Param(ctype, name, "stream", base, "cudaStream_t")
    if ctype.count("*") == 1:
        if canonical not in POINTER_DTYPES:
            raise ExportError(f"{where}: parameter '{name}' points to '{base}', which has no torch dtype")
        return Param(ctype, name, "pointer", base, canonical)
    if ctype.count("*") > 1:
        raise ExportError(f"{where}: parameter '{name}' is a pointer to a pointer; pass tensors instead")
    if base == "cudaStream_t":
        return Param(ctype, name, "stream", base, "cudaStream_t")
    if canonical == "long long":
        raise ExportError(f"{where}: parameter '{name}' has type '{base}', which is not int64_t on Linux "
                          "(int64_t is `long`): write int64_t")
    if canonical not in SCALARS:
        raise ExportError(f"{where}: parameter '{name}' has type '{base}'; use a pointer, "
                          f"one of int, int64_t, uint32_t, size_t, float, double, bool, or cudaStream_t")
    return Param(ctype, name, "scalar", base, canonical)


def parse_exports(text: str, filename: str = "<source>") -> list[Export]:
    """Every `COURSE_EXPORT` prototype in `text`, in order."""
    clean = _strip_comments(text)
    exports, declared = [], []
    for m in _EXPORT_RE.finditer(clean):
        line = clean.count("\n", 0, m.start()) + 1
        where = f"{filename}:{line}"
        returns, name, params = "".join(m.group(1).split()), m.group(2), m.group(3).strip()
        if returns not in RETURNS:
            raise ExportError(f"{where}: {name} returns '{returns}'; entry points return one of {sorted(RETURNS)}")
        plist = [] if params in ("", "void") else [_parse_param(p, where) for p in params.split(",")]
        if sum(p.kind == "stream" for p in plist) > 1:
            raise ExportError(f"{where}: {name} takes more than one cudaStream_t")
        # a prototype before the definition (`...);`) declares the same entry point: one export
        prototype_only = clean[m.end():].lstrip().startswith(";")
        (declared if prototype_only else exports).append(Export(name, returns, tuple(plist), line))
    defined = {e.name for e in exports}
    exports += [e for e in declared if e.name not in defined]
    exports.sort(key=lambda e: e.line)
    names = [e.name for e in exports]
    for n in set(names):
        if names.count(n) > 1:
            raise ExportError(f"{filename}: the entry point '{n}' is exported twice")
    return exports


def global_kernel_names(text: str) -> list[str]:
    """Names of the `__global__` functions a source defines."""
    clean = _strip_comments(text)
    # attributes such as __launch_bounds__(...), __cluster_dims__(...), __maxnreg__(...), with (nested) parentheses
    attrs = r"(?:__\w+__\s*(?:\((?:[^()]|\((?:[^()]|\([^()]*\))*\))*\))?\s*)*"
    return re.findall(rf"__global__\s+{attrs}void\s+{attrs}([A-Za-z_]\w*)\s*\(", clean)


def _binding_function(e: Export) -> str:
    args, checks, call = [], [], []
    first_tensor = None
    # An entry point that takes a row stride (an integer parameter named *_stride, as Day 12's q_stride)
    # reads rows that need not be packed: its tensors may be views with rows apart (a slice of a fused
    # qkv), as long as each row is contiguous. Every other entry point gets contiguous tensors only.
    strided = "true" if any(p.kind == "scalar" and p.name.endswith("stride") for p in e.params) else "false"
    for p in e.params:
        if p.kind == "pointer":
            args.append(f"const at::Tensor& {p.name}")
            dtype = POINTER_DTYPES[p.type][0]
            checks.append(f'  course_check_tensor({p.name}, "{p.name}", {dtype or "std::nullopt"}, "{e.name}", {strided});')
            call.append(f"static_cast<{p.ctype}>({p.name}.data_ptr())")
            first_tensor = first_tensor or p.name
        elif p.kind == "scalar":
            args.append(f"{SCALARS[p.type]} {p.name}")
            call.append(f"static_cast<{p.base}>({p.name})")
        else:
            call.append("stream")
    body = checks
    if first_tensor:
        body.append(f"  const c10::cuda::CUDAGuard guard({first_tensor}.device());")
    body.append("  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();")
    body.append("  (void)stream;")
    invoke = f"::{e.name}({', '.join(call)})"
    if e.returns == "cudaError_t":
        body.append(f"  const cudaError_t err = {invoke};")
        body.append(f'  TORCH_CHECK(err == cudaSuccess, "{e.name} returned ", cudaGetErrorName(err), ": ", cudaGetErrorString(err));')
        ret = "void"
    elif e.returns == "void":
        body.append(f"  {invoke};")
        ret = "void"
    else:
        body.append(f"  return {invoke};")
        ret = e.returns
    return f"static {ret} py_{e.name}({', '.join(args)}) {{\n" + "\n".join(body) + "\n}\n"


# What a binding needs of torch, CUDA and pybind11, and no more: a tensor, pybind11 with torch's casters, the
# device guard and stream, the CUDA types. Its own header (extension.PRELUDE_FILE), precompiled once per
# torch install: a binding compiles in ~3.5 s against it, ~9 s against torch/extension.h (precompiled
# too: torch's whole C++ API, 786 MB against this one's ~315 MB).
BINDING_PRELUDE = r"""#include <ATen/core/Tensor.h>
#include <torch/csrc/utils/pybind.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
"""

BINDING_HEADER = r"""#include <course_binding_prelude.h>
#include <cuda.h>

// Generated by the course grader from the COURSE_EXPORT prototypes of the .cu files.
static void course_check_tensor(const at::Tensor& t, const char* name,
                                std::optional<at::ScalarType> dtype, const char* fn, bool strided_rows) {
  TORCH_CHECK(t.is_cuda(), fn, ": '", name, "' must be a CUDA tensor, got one on ", t.device());
  if (strided_rows) {
    TORCH_CHECK(t.is_contiguous() || (t.dim() > 0 && t.stride(-1) == 1), fn, ": '", name,
                "' must have contiguous rows (stride 1 in its last dimension; call .contiguous())");
  } else {
    TORCH_CHECK(t.is_contiguous(), fn, ": '", name, "' must be contiguous (call .contiguous())");
  }
  if (dtype) {
    TORCH_CHECK(t.scalar_type() == *dtype, fn, ": '", name, "' must be ", c10::toString(*dtype),
                ", got ", t.scalar_type());
  }
}

// The one driver function a kernel file's launcher may reach (course/hopper.cuh's tensor_map_2d):
// Hopper's TMA copies need a tensor map, which only the driver encodes. It is looked up here, in the
// grader's own code, so that a submission's host code never holds a way to the driver's other functions.
extern "C" int course_encode_tensor_map_tiled(CUtensorMap* map, CUtensorMapDataType type, cuuint32_t rank, void* base,
                                              const cuuint64_t* dims, const cuuint64_t* strides,
                                              const cuuint32_t* box, const cuuint32_t* steps,
                                              CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                              CUtensorMapL2promotion promotion, CUtensorMapFloatOOBfill fill) {
  using Encode = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                              const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                              CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static const Encode encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found;
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                                             &found);
    return err == cudaSuccess && found == cudaDriverEntryPointSuccess ? reinterpret_cast<Encode>(fn) : nullptr;
  }();
  if (encode == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return encode(map, type, rank, base, dims, strides, box, steps, interleave, swizzle, promotion, fill);
}
"""


def generate_binding(exports: list[Export]) -> str:
    """C++ source of a pybind11 module exposing `exports` to Python."""
    lines = [BINDING_HEADER, "// Entry points defined in the .cu files."]
    lines += [f"{e.prototype()};" for e in exports]
    lines.append("")
    lines += [_binding_function(e) for e in exports]
    lines.append("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {")
    for e in exports:
        doc = e.python_signature().replace('"', "'")
        names = "".join(f', pybind11::arg("{p.name}")' for p in e.params if p.kind != "stream")
        lines.append(f'  m.def("{e.name}", &py_{e.name}, "{doc}"{names});')
    lines.append("}")
    return "\n".join(lines) + "\n"

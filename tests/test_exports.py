import pytest

from grader.jit.exports import ExportError, generate_binding, global_kernel_names, parse_exports

SRC = """
// COURSE_EXPORT void commented_out(float* x);
template <typename T> __global__ void __launch_bounds__(256) scale_kernel(T* x, int64_t n) {}
__global__ void other_kernel(float* x) {}
COURSE_EXPORT cudaError_t scale_fp16(__half* out, const __half* __restrict__ in,
                                     int64_t n, float alpha, cudaStream_t stream) { return cudaSuccess; }
COURSE_EXPORT int device_count() { return 1; }
"""


def test_parse_exports_reads_pointers_scalars_and_stream():
    exports = parse_exports(SRC, "x.cu")
    assert [e.name for e in exports] == ["scale_fp16", "device_count"]
    e = exports[0]
    assert [(p.kind, p.base, p.name) for p in e.params] == [
        ("pointer", "__half", "out"), ("pointer", "__half", "in"), ("scalar", "int64_t", "n"),
        ("scalar", "float", "alpha"), ("stream", "cudaStream_t", "stream")]
    assert e.line == 5
    assert e.python_signature() == "scale_fp16(out: Tensor[float16], in: Tensor[float16], n: int, alpha: float)"


def test_kernel_names_include_launch_bounds_and_templates():
    assert global_kernel_names(SRC) == ["scale_kernel", "other_kernel"]
    # launch bounds whose arguments hold parentheses (Day 10's fp8_quantize: a false "not one of
    # your kernels" on the H100 when the name was missed)
    nested = ("__global__ void __launch_bounds__(B, (K * B <= 1024 ? (M ? M : 1024 / B) : 2)) "
              "quant_kernel(float* x) {}")
    assert global_kernel_names(nested) == ["quant_kernel"]
    # any attribute, before or after `void`: a cluster kernel is named by its name, not its attribute
    cluster = ("__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384, 1) gemm_kernel(int m) {}\n"
               "__global__ __maxnreg__(128) void small_kernel() {}")
    assert global_kernel_names(cluster) == ["gemm_kernel", "small_kernel"]


@pytest.mark.parametrize("bad, message", [
    ("COURSE_EXPORT cudaError_t f(std::vector<int> v);", "has type"),
    ("COURSE_EXPORT cudaError_t f(float** p);", "pointer to a pointer"),
    ("COURSE_EXPORT cudaError_t f(dim3* p);", "no torch dtype"),
    ("COURSE_EXPORT float* f(int n);", "returns"),
    ("COURSE_EXPORT cudaError_t f(int);", "give every parameter a name"),
    ("COURSE_EXPORT void f(int a);\nCOURSE_EXPORT void f(int b);", "exported twice"),
])
def test_bad_entry_points_are_explained(bad, message):
    with pytest.raises(ExportError, match=message):
        parse_exports(bad, "bad.cu")


def test_binding_checks_tensors_and_errors():
    text = generate_binding(parse_exports(SRC))
    assert text.startswith("#include <course_binding_prelude.h>")  # first, so its precompiled form applies
    assert 'course_check_tensor(out, "out", at::kHalf, "scale_fp16", false)' in text  # contiguous only
    assert "cudaGetErrorString(err)" in text
    assert 'm.def("device_count", &py_device_count' in text


def test_an_entry_point_with_a_row_stride_accepts_rows_apart():
    # Day 12's q, k, v may be slices of one fused qkv buffer: rows apart, each row contiguous. An entry
    # point says it reads such rows by taking a *_stride parameter; no other gets a non-contiguous tensor.
    src = ("COURSE_EXPORT cudaError_t attn(__half* o, const __half* q, int64_t n, int64_t q_stride, "
           "cudaStream_t stream);")
    text = generate_binding(parse_exports(src))
    assert 'course_check_tensor(q, "q", at::kHalf, "attn", true)' in text
    assert "t.stride(-1) == 1" in text

"""The ctypes bindings against the real libraries: every cuDNN and cuBLAS function einsat binds
(`cudnn.SIGNATURES`, `cublas.SIGNATURES`) has, in the wheels' headers, the argument and return
types einsat declares, and every enum value einsat hard-codes equals the header's.

A small C++ program is generated, compiled against the headers with the host compiler, and
prints each function's parameter types as ABI classes (pointer, 32/64-bit signed or unsigned
integer, float, 32-bit enum), and the value of each constant einsat hard-codes. The libraries
themselves are loaded (no device needed) and must export every bound function.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

import pytest

from einsat.gpu.kernels import cublas, cudnn, libload

CXX = shutil.which(os.environ.get("CXX", "g++"))

# every hard-coded value: einsat's name -> the header's expression
CONSTANTS = {
    (cudnn, "DATA_FLOAT"): "CUDNN_DATA_FLOAT", (cudnn, "DATA_DOUBLE"): "CUDNN_DATA_DOUBLE",
    (cudnn, "DATA_HALF"): "CUDNN_DATA_HALF", (cudnn, "TENSOR_NCHW"): "CUDNN_TENSOR_NCHW",
    (cudnn, "DATA_BFLOAT16"): "CUDNN_DATA_BFLOAT16",
    (cudnn, "CROSS_CORRELATION"): "CUDNN_CROSS_CORRELATION", (cudnn, "MATH_DEFAULT"): "CUDNN_DEFAULT_MATH",
    (cudnn, "MATH_TENSOR_OP"): "CUDNN_TENSOR_OP_MATH", (cudnn, "MATH_FMA"): "CUDNN_FMA_MATH",
    (cudnn, "FWD_ALGOS"): "CUDNN_CONVOLUTION_FWD_ALGO_COUNT",
    (cudnn, "BWD_DATA_ALGOS"): "CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT",
    (cublas, "OP_N"): "CUBLAS_OP_N", (cublas, "OP_T"): "CUBLAS_OP_T",
    (cublas, "CUDA_R_32F"): "CUDA_R_32F", (cublas, "CUDA_R_64F"): "CUDA_R_64F", (cublas, "CUDA_R_16F"): "CUDA_R_16F",
    (cublas, "CUDA_R_16BF"): "CUDA_R_16BF", (cublas, "COMPUTE_32F"): "CUBLAS_COMPUTE_32F",
    (cublas, "COMPUTE_32F_FAST_TF32"): "CUBLAS_COMPUTE_32F_FAST_TF32", (cublas, "COMPUTE_64F"): "CUBLAS_COMPUTE_64F",
    (cublas, "GEMM_DEFAULT"): "CUBLAS_GEMM_DEFAULT", (cublas, "INT_MAX"): "INT_MAX",
}
# C++ overloads (static inline wrappers beside the exported C function) make `&fn` ambiguous:
# the exported one is picked by its exact type, so a different declaration fails to compile
OVERLOADED = {
    "cublasGemmStridedBatchedEx": "cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, "
                                  "int, const void*, const void*, cudaDataType, int, long long, const void*, "
                                  "cudaDataType, int, long long, const void*, void*, cudaDataType, int, long long, "
                                  "int, cublasComputeType_t, cublasGemmAlgo_t)",
}
# upper-case ints of the binding modules that are einsat's own choices, not library values
OWN = {(cudnn, "MAX_SPATIAL"), (cudnn, "WORKSPACE_LIMIT"), (cudnn, "SCREEN_FACTOR"), (cublas, "WORKSPACE_BYTES")}


def signature_program(*headers: str) -> str:
    """A C++ program over `headers` that prints the kind and width of every argument of the
    functions its body (`@BODY@`: `Sig<decltype(&f)>::print("f");` lines) names."""
    includes = "".join(f"#include <{h}>\n" for h in ("cstddef", "climits", "cstdio", "type_traits", *headers))
    return includes + TEMPLATES


TEMPLATES = r"""template <class T> void kind() {
    if constexpr (std::is_void_v<T>) std::printf(" void");
    else if constexpr (std::is_pointer_v<T>) std::printf(" ptr");
    else if constexpr (std::is_floating_point_v<T>) std::printf(" f%zu", sizeof(T) * 8);
    else if constexpr (std::is_enum_v<T>) std::printf(" e%zu", sizeof(T) * 8);
    else std::printf(" %s%zu", std::is_signed_v<T> ? "i" : "u", sizeof(T) * 8);
}
template <class F> struct Sig;
template <class R, class... A> struct Sig<R (*)(A...)> {
    static void print(const char* name) {
        std::printf("fn %s", name);
        kind<R>();
        (kind<A>(), ...);
        std::printf("\n");
    }
};
int main() {
@BODY@
}
"""
PROGRAM = signature_program("cudnn.h", "cublas_v2.h")


def ctype_kind(t) -> str:
    if t is None:
        return "void"
    if t in (ctypes.c_void_p, ctypes.c_char_p) or issubclass(t, ctypes._Pointer):
        return "ptr"
    if issubclass(t, (ctypes.c_float, ctypes.c_double)):
        return f"f{ctypes.sizeof(t) * 8}"
    signed = t(-1).value == -1
    return f"{'i' if signed else 'u'}{ctypes.sizeof(t) * 8}"


def include_dir(name: str) -> str:
    """The include folder beside the wheel library `name` (nvidia/<pkg>/lib/<so> -> nvidia/<pkg>/include)."""
    for path in libload.candidates(name):
        inc = os.path.join(os.path.dirname(os.path.dirname(path)), "include")
        if os.path.isdir(inc):
            return inc
    return ""


@pytest.fixture(scope="module")
def headers(pytestconfig, cudnn_descriptors, cupy_module):
    """The include folders: cuDNN's and the CUDA toolkit wheels' (cuBLAS, the runtime, crt), and
    the CCCL that CuPy bundles (cuda_fp16.h includes <nv/target>)."""
    from tests.gpu.conftest import missing_gpu_libs
    cccl = os.path.join(os.path.dirname(cupy_module.__file__), "_core", "include", "cupy", "_cccl", "libcudacxx")
    dirs = [include_dir("cudnn"), include_dir("cublas"), cccl if os.path.isdir(cccl) else ""]
    if not all(dirs) or not os.path.exists(os.path.join(dirs[1], "crt", "host_defines.h")):
        missing_gpu_libs(pytestconfig, f"the cuDNN / cuBLAS / nvidia-cuda-crt wheels' headers are not all found "
                                       f"({dirs})")
    if CXX is None:
        pytest.skip("no host C++ compiler")
    return dirs


@pytest.fixture(scope="module")
def declared(headers, tmp_path_factory):
    """{function: [return kind, arg kinds...]} and {expression: value}, from the headers."""
    pointer = lambda fn: f"static_cast<{OVERLOADED[fn]}>(&{fn})" if fn in OVERLOADED else f"&{fn}"  # noqa: E731
    # decltype: the declarations only (nothing to link)
    lines = [f'    Sig<decltype({pointer(fn)})>::print("{fn}");' for fn in (*cudnn.SIGNATURES, *cublas.SIGNATURES)]
    lines += [f'    std::printf("value {expr} %lld\\n", (long long)({expr}));' for expr in CONSTANTS.values()]
    return run_signature_program(PROGRAM, lines, headers, tmp_path_factory.mktemp("abi"))


def run_signature_program(program: str, lines: list[str], headers, folder):
    """`program` with `lines` as its body, built against `headers` and run: ({function: [return
    kind, arg kinds...]}, {name: value}) from its "fn" and "value" lines."""
    src, exe = folder / "abi.cpp", folder / "abi"
    src.write_text(program.replace("@BODY@", "\n".join(lines)))
    build = subprocess.run([CXX, "-std=c++17", "-w", *[f"-I{d}" for d in headers], str(src), "-o", str(exe)],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-4000:]
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    fns = {ln.split()[1]: ln.split()[2:] for ln in out.splitlines() if ln.startswith("fn ")}
    values = {ln.split()[1]: int(ln.split()[2]) for ln in out.splitlines() if ln.startswith("value ")}
    return fns, values


@pytest.mark.parametrize("module", [cudnn, cublas], ids=["cudnn", "cublas"])
def test_bound_signatures_match_the_headers(declared, module):
    fns, _ = declared
    for fn, (args, res) in module.SIGNATURES.items():
        ours = [ctype_kind(res)] + [ctype_kind(a) for a in args]
        # a 32-bit enum is passed as a C int (its values einsat uses are checked below)
        theirs = ["i32" if k == "e32" else k for k in fns[fn]]
        assert ours == theirs, f"{fn}: einsat binds {ours}, the header declares {fns[fn]}"


def test_hard_coded_values_match_the_headers(declared):
    _, values = declared
    wrong = {f"{m.__name__.split('.')[-1]}.{a}": (getattr(m, a), values[expr])
             for (m, a), expr in CONSTANTS.items() if getattr(m, a) != values[expr]}
    assert not wrong, f"einsat's value vs the header's: {wrong}"


@pytest.mark.parametrize("module", [cudnn, cublas], ids=["cudnn", "cublas"])
def test_every_hard_coded_int_is_checked(module):
    names = {a for a, v in vars(module).items() if a.isupper() and type(v) is int}
    covered = {a for (m, a) in CONSTANTS if m is module} | {a for (m, a) in OWN if m is module}
    assert names == covered, f"unchecked constants: {sorted(names - covered)}"


def test_libraries_export_every_bound_function(headers):
    for name, module in (("cudnn", cudnn), ("cublas", cublas)):
        lib = libload.load(name)
        missing = [fn for fn in module.SIGNATURES if not hasattr(lib, fn)]
        assert not missing, f"lib{name} does not export {missing}"

"""The ONNX conformance node suite: every case einsat accepts runs and equals the reference.

For each node test case of the installed onnx package (`onnx_node_cases`), einsat either refuses
the model at `load_onnx` with an `EinsatError` (a sequence input, a string tensor, an opset it
cannot read, ...) or imports it, runs it on the NumPy backend and computes every output with the
reference's dtype and shape, and values within the case's own tolerance (ONNX's rtol/atol for that
case: 1e-3/1e-7 unless the case says otherwise) widened by 8 units of the last place at the
output's largest magnitude (an element near zero in an output of large values carries the
rounding of the large ones: DFT's zeros in an output of 540s), integers and bools exactly.

All 1884 cases of onnx 1.23 take about 20 s of one core (after generating them once, `onnx_node_cases`).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

import einsat
from einsat.errors import EinsatError
from tests.ir.onnx_node_cases import case_names, read_case

# outputs drawn at random by the op (the reference's draw cannot be reproduced): shape and dtype only
RANDOM = {"test_bernoulli", "test_bernoulli_double", "test_bernoulli_seed", "test_bernoulli_expanded",
          "test_bernoulli_double_expanded", "test_bernoulli_seed_expanded",
          # dropout in training mode: a random mask (onnxruntime's generator is not NumPy's)
          "test_training_dropout", "test_training_dropout_default", "test_training_dropout_default_mask",
          "test_training_dropout_mask"}

def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        metafunc.parametrize("case", case_names())


def assert_equal_output(name: str, got: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> None:
    assert got.dtype == ref.dtype and got.shape == ref.shape, \
        f"{name}: einsat computed {got.dtype}{list(got.shape)}, the reference {ref.dtype}{list(ref.shape)}"
    if ref.dtype.kind in "iub":
        assert np.array_equal(got, ref), f"{name}: differs from the reference"
    else:  # float16/32/64 and bfloat16 (ml_dtypes): NaNs in the same places
        ref64 = ref.astype(np.float64)
        finite = np.abs(ref64[np.isfinite(ref64)])
        ulps = 8 * float(ml_dtypes.finfo(ref.dtype).eps) * (finite.max() if finite.size else 0.0)
        np.testing.assert_allclose(got.astype(np.float64), ref64, rtol=rtol, atol=atol + ulps, err_msg=name)


def test_node_case(case):
    model, data_sets, rtol, atol = read_case(case)
    try:
        g = einsat.load_onnx(model)
    except EinsatError as e:  # refused, with a message naming the model
        assert f"model {case!r}" in str(e), str(e)
        return
    for inputs, outputs in data_sets:
        feeds = dict(zip((i.name for i in model.graph.input), inputs))
        got = einsat.run(g, {k: v for k, v in feeds.items() if k in g.inputs})
        for o, ref in zip(model.graph.output, outputs):
            if case in RANDOM:
                assert got[o.name].shape == ref.shape and got[o.name].dtype == ref.dtype
            else:
                assert_equal_output(o.name, got[o.name], ref, rtol, atol)

"""Nothing the user sees changes: ten workloads extract the programs they extracted before #26.

`scripts/fingerprints.py` optimizes ten small workloads that between them take every path of a
run (a CNN, TASO's BERT, an LLM decoder layer against a KV cache, NasRNN, a PET mutant, an EinNet
derivation, a partitioned model with reused pieces, cost="cpu" on a scripted profile, the fusion
generator, an imperative function) under limits of work, not time, and reduces each result to a
structural key (ops, attributes, wiring, types; no value names), a sketch of each weight, its op
counts and its modeled cost. The saved ones are in `tests/data/fingerprints.json` (each entry's
"commit" is the commit of the code that made it); each is recomputed here and must be the same:
the structure, op counts and cost exactly, the weights within a tolerance that lets through the
last bits a CPU's BLAS kernel rounds its own way in folded weights and nothing more (#38: the
same program's folded weights differ in their last bits between OpenBLAS's Haswell, SkylakeX and
Prescott kernels). `make test-blas` runs these tests again under another kernel than the
machine's.

A change that is meant to change what is extracted: commit it, then regenerate with
`.venv/bin/python scripts/fingerprints.py --write` (it computes each twice, checks they agree,
prints what changed and records the commit; it refuses an uncommitted tree) and commit the file,
saying which workloads changed and why. `scripts/fingerprints.py --tree DIR NAME` computes one
with another checkout, to find the commit that changed it.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pytestmark = pytest.mark.saved_results

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "fingerprints.py"
SAVED = json.loads((ROOT / "tests" / "data" / "fingerprints.json").read_text())


def _script():
    spec = importlib.util.spec_from_file_location("einsat_fingerprints_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fingerprints = _script()


def test_the_saved_fingerprints_are_the_ten_workloads():
    assert list(SAVED) == list(fingerprints.WORKLOADS)
    assert len(SAVED) == 10
    for name, saved in SAVED.items():
        assert {"structure", "weights", "ops", "cost_after", "commit"} <= set(saved), name
        assert saved["weights"] and all({"dtype", "shape"} <= set(w) for w in saved["weights"]), name


def test_each_saved_fingerprint_names_a_commit_of_this_repository():
    """Made from a committed tree: no "+changes", and the commit is in this clone's history (where
    the clone has it: a shallow one may not; after a rebase, `--write` records the new one)."""
    for name, saved in SAVED.items():
        assert fingerprints.real_commit(saved["commit"]), f"{name}: made at {saved['commit']!r}"
        assert not fingerprints.missing_commit(saved["commit"]), f"{name}: {saved['commit']} is not in this history"


def test_a_commit_not_in_the_history_is_told():
    def git(*args):
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout.strip()
    full = git("rev-parse", "--is-shallow-repository") == "false"
    assert not fingerprints.missing_commit(git("rev-parse", "--short", "HEAD"))
    assert fingerprints.missing_commit("0123456") == full  # made up: missing, where the history can tell
    assert not fingerprints.real_commit("3f92116+changes") and fingerprints.real_commit("3f92116")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(fingerprints.WORKLOADS))
def test_the_extracted_program_is_the_saved_one(name):
    now = fingerprints.compute(name)  # raises if a phase stopped on the clock rather than on work
    changed = fingerprints.differences(name, SAVED.get(name), now)
    assert not changed, (
        f"workload {name!r} now extracts a different program than the saved fingerprint "
        f"(tests/data/fingerprints.json, made at {SAVED.get(name, {}).get('commit')}):\n  " + "\n  ".join(changed) +
        "\nIf the change is intended, regenerate with `.venv/bin/python scripts/fingerprints.py --write` "
        "and say in the commit which workloads changed and why; if not, `python scripts/fingerprints.py "
        f"--tree DIR {name}` on clones at earlier commits finds the one that changed it.")


def test_a_different_program_is_caught():
    """The comparison can fail: a program with one op more than the saved one differs."""
    saved = SAVED["bert_tensat"]
    other = {**saved, "structure": "0" * 64, "ops": {**saved["ops"], "relu": saved["ops"].get("relu", 0) + 1}}
    changed = fingerprints.differences("bert_tensat", saved, other)
    assert any("structure" in c for c in changed) and any("relu" in c for c in changed)



# -- weights: the last bits a BLAS kernel rounds do not count, a change of the values does -----------

def _program(w1: np.ndarray, w2: np.ndarray):
    """`einsat.optimize`'s result as the fingerprint reads it, for a program x @ w1 @ w2."""
    from einsat import GraphBuilder
    b = GraphBuilder("two_weights")
    g = b.build(b.matmul(b.matmul(b.input("x", (4, w1.shape[0])), b.weight("w1", w1)), b.weight("w2", w2)))
    return SimpleNamespace(graph=g, report=SimpleNamespace(cost_after=1.0))


def _weights():
    rng = np.random.default_rng(38)
    return rng.standard_normal((48, 48)).astype(np.float32), rng.standard_normal((48, 32)).astype(np.float32)


def _ulps(a: np.ndarray, most: int, seed: int) -> np.ndarray:
    """`a` with each element moved by up to `most` ulps either way (what another kernel's rounding does)."""
    steps = np.random.default_rng(seed).integers(-most, most + 1, a.shape)
    out = a.copy()
    for _ in range(most):
        move = steps != 0
        out[move] = np.nextafter(out[move], np.where(steps[move] > 0, np.inf, -np.inf).astype(a.dtype))
        steps = steps - np.sign(steps)
    return out


def test_weights_a_few_ulps_off_are_the_same_fingerprint():
    """Every element of every weight up to 4 ulps off (another BLAS kernel rounds 1 or 2): the same."""
    w1, w2 = _weights()
    saved = fingerprints.fingerprint(_program(w1, w2))
    for seed in range(5):
        now = fingerprints.fingerprint(_program(_ulps(w1, 4, seed), _ulps(w2, 4, seed + 100)))
        assert now["weights"] != saved["weights"]  # the figures moved ...
        assert fingerprints.differences("two_weights", saved, now) == []  # ... within the tolerance


def test_a_folded_weight_summed_in_another_order_is_the_same_fingerprint():
    """A product of weights summed in float32 by BLAS and in float64 then rounded (last bits differ,
    as between kernels) keeps one fingerprint; the product of other factors does not."""
    w1, w2 = _weights()
    blas = w1 @ w2
    exact = (w1.astype(np.float64) @ w2.astype(np.float64)).astype(np.float32)
    assert not np.array_equal(blas, exact)
    saved = fingerprints.fingerprint(_program(w1, blas))
    assert fingerprints.differences("folded", saved, fingerprints.fingerprint(_program(w1, exact))) == []
    other = (w1[::-1] @ w2).astype(np.float32)
    assert any("weight 1" in c for c in fingerprints.differences("folded", saved,
                                                                 fingerprints.fingerprint(_program(w1, other))))


def _one_element(w):
    out = w.copy()
    out[3, 5] += 1e-3 * np.linalg.norm(w)  # 66 times the tolerance (1.5e-5 of the norm)
    return out


def _swap(w):
    out = w.copy()
    out[[0, 1]] = out[[1, 0]]  # two rows trade places: the same values, norm and largest magnitude
    return out


def _sign(w):
    out = w.copy()
    out[7, 7] = -out[7, 7]
    return out


@pytest.mark.parametrize("change", [
    _one_element,
    lambda w: w * np.float32(1 + 1e-4),   # scaled by 7 times the tolerance
    _swap,
    lambda w: np.ascontiguousarray(w.T),  # transposed: the same type, values, norm
    _sign,
    lambda w: np.flip(w, axis=1).copy(),
], ids=["one_element", "scaled", "two_rows_swapped", "transposed", "one_sign", "columns_reversed"])
def test_a_weight_changed_beyond_the_tolerance_is_caught(change):
    w1, w2 = _weights()
    saved = fingerprints.fingerprint(_program(w1, w2))
    changed = fingerprints.differences("two_weights", saved, fingerprints.fingerprint(_program(change(w1), w2)))
    assert changed and all("weight 0" in c for c in changed), changed


def test_integer_weights_are_compared_exactly():
    a = fingerprints.sketch(np.arange(12, dtype=np.int64).reshape(3, 4))
    b = fingerprints.sketch(np.arange(12, dtype=np.int64).reshape(3, 4) + np.eye(3, 4, dtype=np.int64))
    assert "sha256" in a and fingerprints.sketch_differences(a, a) == []
    assert fingerprints.sketch_differences(a, b) == ["values (compared exactly) differ"]


def test_a_sketch_is_a_function_of_the_values_alone():
    """Summed exactly (math.fsum) with signs from SHAKE-256: integers give integer sums, and the
    figures do not depend on how NumPy or BLAS would sum (here: reversed in memory, same values)."""
    a = np.arange(-50, 50, dtype=np.float32).reshape(10, 10)
    s = fingerprints.sketch(a)
    assert s["l2"] == float(np.sqrt(np.sum(np.arange(-50, 50, dtype=np.float64) ** 2)))
    assert s["max"] == 50.0 and all(v == int(v) for v in s["signed"])
    assert len(set(s["signed"])) == fingerprints.SIGNS  # the sign patterns differ from one another
    assert fingerprints.sketch(np.ascontiguousarray(a[::-1, ::-1])[::-1, ::-1]) == s


def test_fingerprints_saved_before_38_ask_to_be_regenerated():
    saved = {**SAVED["nasrnn"], "weights": "5f87964413cce5a1af35a7f7302988a5c56e787d5120660cdf73314848c92f3c"}
    changed = fingerprints.differences("nasrnn", saved, SAVED["nasrnn"])
    assert len(changed) == 1 and "regenerate" in changed[0]

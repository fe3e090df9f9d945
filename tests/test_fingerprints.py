"""Nothing the user sees changes: ten workloads extract the programs they extracted before #26.

`scripts/fingerprints.py` optimizes ten small workloads that between them take every path of a
run (a CNN, TASO's BERT, an LLM decoder layer against a KV cache, NasRNN, a PET mutant, an EinNet
derivation, a partitioned model with reused pieces, cost="cpu" on a scripted profile, the fusion
generator, an imperative function) under limits of work, not time, and reduces each result to a
structural key (ops, attributes, wiring, types; no value names), a digest of its weights, its op
counts and its modeled cost. The saved ones in `tests/data/fingerprints.json` were made at commit
a187c90 (each entry's "commit"), before the orchestration moved into `einsat/pipeline/`; each is
recomputed here and must be the same.

A change that is meant to change what is extracted: regenerate with
`.venv/bin/python scripts/fingerprints.py --write` (it computes each twice, checks they agree,
prints what changed and records the commit) and say in the commit which workloads changed and why.
`scripts/fingerprints.py --tree DIR NAME` computes one with another checkout, to find the commit
that changed it.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

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
        assert {"structure", "weights", "ops", "cost_after"} <= set(saved), name


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

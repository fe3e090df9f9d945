"""`einsat fuzz --target mutate`: passes on the generator, and catches an admission that skips
the correction."""

from einsat import GraphBuilder
from einsat.cli import main
from einsat.rewrites.mutate import generate
from einsat.rewrites.mutate.admit import Verdict
from einsat.testing import fuzz_mutate
from einsat.testing.fuzz import fuzz
from einsat.testing.fuzz_mutate import check


def test_the_mutate_target_passes(capsys):
    assert main(["fuzz", "--target", "mutate", "--budget", "12", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "mutate: 12 cases" in out and "all passed" in out


def test_an_uncorrected_mutant_let_in_is_caught(monkeypatch):
    monkeypatch.setattr(generate, "admit", lambda original, mutant: Verdict(mutant, False))
    report = fuzz(30, 0, ["mutate"])
    assert not report.ok and "does not hold" in report.failures[0].message


def test_the_check_names_a_crash(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    b = GraphBuilder("conv")
    g = b.build(b.conv(b.input("x", (2, 1, 4, 4)), b.weight("w", (1, 1, 3, 3)), padding=1))
    assert check(g) is None
    monkeypatch.setattr(fuzz_mutate, "assert_consistent", broken)
    assert "RuntimeError: boom" in check(g)

"""Every figure README.md and docs/ quote is the figure of a results file that names its commit.

The convention (docs/architecture.md, "Figures"): a sentence that quotes measured or modeled figures
names the results file they come from (`benchmarks/results/<file>.md`, as a link or a path), and
each figure in it (a speed-up `1.10×`, a count `14 of 32` or `14/32`, a percentage, a time in s, ms
or µs; ranges like `1.10-1.12×` or `19–28 of 32` are each end) appears in that file as written.
A sentence with a speed-up or a count "N of M" and no results file is a figure from nowhere.
Unmeasured values in the results JSONs are null, never 0.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

RESULTS_FILE = re.compile(r"benchmarks/results/([\w/.-]+?\.md)\b")
NUMBER = r"\d[\d,]*(?:\.\d+)?"
DASH = r"\s?[-–]\s?"
SPEEDUP = re.compile(rf"({NUMBER})(?:{DASH}({NUMBER}))?\s?[×x](?![\w])")
COUNT = re.compile(rf"\b(\d+)(?:{DASH}(\d+)|(?:, \d+)*,? and (\d+))?\s?(?:of(?: the)?|/)\s?(\d+)\b")
PERCENT = re.compile(rf"({NUMBER})(?:{DASH}({NUMBER}))?\s?%")
TIME = re.compile(rf"({NUMBER})(?:{DASH}({NUMBER}))?\s?(?:s|ms|µs)\b")
COMMIT = re.compile(r"commit[s]?\W{0,3}`?[0-9a-f]{7,40}\b", re.I)


def sentences(text: str):
    """The document's sentences outside code blocks, each on one line (a paragraph or list item
    is split at a full stop followed by a capital, a link or a code span)."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    for block in re.split(r"\n\s*\n|\n(?=\s*(?:[-*] |\d+\. |#|\|))", text):
        block = " ".join(block.split())
        if block.startswith("|"):
            continue  # a table row: the tables in docs/ are of settings and ops, not results
        yield from re.split(r"(?<=[.!?])\s+(?=[A-Z\[(`*])", block)


def figures(sentence: str) -> list[str]:
    """The figures a sentence quotes, normalized: '1.10x', '14/32', '15%', '7.0 s' (each end of a range)."""
    text = re.sub(r"\]\([^)]*\)", "]", sentence)  # link targets carry no figures
    text = re.sub(r"`[^`]*`", "", text)  # nor code: commits, commands, file names, keyword values
    out = []
    for m in SPEEDUP.finditer(text):
        out += [f"{_n(v)}x" for v in m.groups() if v]
    for m in COUNT.finditer(text):
        *firsts, total = m.groups()
        if all(int(v) <= int(total) for v in firsts if v) and int(total) > 0:  # a count, not 32/8 heads or 9/5
            out += [f"{v}/{total}" for v in firsts if v]
    for m in PERCENT.finditer(text):
        out += [f"{_n(v)}%" for v in m.groups() if v]
    for m in TIME.finditer(text):
        out += [f"{_n(v)} s" for v in m.groups() if v]
    return out


def _n(v: str) -> str:
    return v.replace(",", "")


def tokens(results_text: str) -> set[str]:
    """What a results file says, in the normalized forms `figures` gives: each speed-up ('1.10x',
    also '1.10×'), percentage, count ('N/M' or 'N of M'), and every number as a time (tables give
    times without their unit)."""
    text = results_text.replace("×", "x").replace(",", "")
    numbers = set(re.findall(r"(?<![\w.])[-+]?(\d+(?:\.\d+)?)", text))
    speedups = {f"{v}x" for v in re.findall(r"(?<![\w.])(\d+(?:\.\d+)?)\s?x(?![a-zA-Z])", text)}
    percents = {f"{v}%" for v in re.findall(r"(?<![\w.])[-+]?(\d+(?:\.\d+)?)\s?%", text)}
    counts = {f"{a}/{b}" for a, b in re.findall(r"\b(\d+)\s?(?:/|of(?: the)?)\s?(\d+)\b", text)}
    return counts | speedups | percents | {f"{v} s" for v in numbers}


def quotes(path: Path) -> list[tuple[str, list[str], list[str]]]:
    """(sentence, results files it names, figures it quotes) for each sentence with figures."""
    out = []
    for s in sentences(path.read_text()):
        named = RESULTS_FILE.findall(s)
        found = figures(s)
        if found:
            out.append((s, named, found))
    return out


def unmatched(sentence_files: list[str], found: list[str]) -> list[str]:
    """The figures that none of the named results files says."""
    said = set().union(*(tokens((RESULTS / f).read_text()) for f in sentence_files))
    return [f for f in found if f not in said]


def names_its_commit(md: Path) -> bool:
    """The results file, or the JSON beside it, names the commit its figures were taken at."""
    if COMMIT.search(md.read_text()):
        return True
    data = md.with_suffix(".json")
    if data.is_file():
        d = json.loads(data.read_text())
        meta = d.get("meta", d) if isinstance(d, dict) else {}
        return isinstance(meta, dict) and bool(re.fullmatch(r"[0-9a-f]{7,40}", str(meta.get("commit", ""))))
    return False


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda p: p.name)
def test_each_quoted_figure_is_in_the_results_file_it_names(doc):
    problems = []
    for sentence, named, found in quotes(doc):
        if not named:
            continue
        missing = [f for f in named if not (RESULTS / f).is_file()]
        if missing:
            problems.append(f"names no such file {missing}: {sentence[:160]}")
            continue
        wrong = unmatched(named, found)
        if wrong:
            problems.append(f"{wrong} not in {named}: {sentence[:200]}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("doc", DOCUMENTS, ids=lambda p: p.name)
def test_no_result_is_quoted_without_its_file(doc):
    # a speed-up or a count of programs with no results file named is a figure from nowhere
    loose = [s for s, named, found in quotes(doc)
             if not named and any(f.endswith("x") or "/" in f for f in found)]
    assert not loose, "quote these from a results file (name it in the sentence):\n" + "\n".join(
        s[:200] for s in loose)


def test_every_quoted_results_file_names_its_commit():
    quoted = {f for doc in DOCUMENTS for _, named, _ in quotes(doc) for f in named}
    assert quoted, "README and docs/ quote no results file: the scan is broken"
    nameless = sorted(f for f in quoted if (RESULTS / f).is_file() and not names_its_commit(RESULTS / f))
    assert not nameless, f"results files quoted without their commit: {nameless}"


def test_an_altered_figure_fails_the_check(tmp_path):
    # the check can fail: the README's own quotes pass, and the same sentences with one figure
    # changed do not
    cases = [(s, named, found) for s, named, found in quotes(ROOT / "README.md") if named]
    assert len(cases) >= 5
    for sentence, named, found in cases:
        assert not unmatched(named, found)
        first = found[0]
        value = first.rstrip("x% s").split("/")[0]
        whole = value.split(".")[0]
        # a count stays a count (N-1 of M), any other figure gains 97
        new = str(int(whole) - 1 if "/" in first and int(whole) > 0 else int(whole) + 97)
        altered = re.sub(rf"(?<![\d.]){re.escape(value)}(?![\d])", new + value[len(whole):], sentence, count=1)
        assert altered != sentence
        assert unmatched(named, figures(altered)), f"an altered figure passed: {altered[:200]}"


def test_the_scan_reads_the_forms_the_docs_use():
    assert figures("runs 1.102× faster (geomean over 32 workloads, slowest 1.000×)") == ["1.102x", "1.000x"]
    assert figures("modeled 1.10-1.12x over it") == ["1.10x", "1.12x"]
    assert figures("within 15% on 14 of 32, and 19–28 of 32 from a profile") == ["14/32", "19/32", "28/32", "15%"]
    assert figures("28, 19 and 21 of 32 from the profile") == ["28/32", "21/32"]
    assert figures("the 8B layer in 7.0 s, 2,057 op signatures, `--budget 10`") == ["7.0 s"]
    assert "14/32" in tokens("within 15%: 14/32 workloads") and "1.102x" in tokens("geomean 1.102x")
    assert "0.40x" in tokens("(0.40×)") and "38/46" in tokens("38 of 46 programs")
    assert figures("38 of the 46 programs") == ["38/46"] and "9/10" in tokens("9 of the 10 workloads")


# ---- unmeasured values are null, never 0 ----------------------------------------------------------

# keys whose value is a measurement that cannot be 0 where it was taken: a time in ms/µs, a
# speed-up or ratio, a share of a time, a tolerance
MEASURED = re.compile(r"(_ms|_us|speedup|ratio|_share|tolerance)$")


def _zeros(value, path=()):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _zeros(v, (*path, str(k)))
    elif isinstance(value, list):
        for v in value:
            yield from _zeros(v, path)
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0 and path \
            and MEASURED.search(path[-1]):
        yield ".".join(path)


def _verifications(value):
    if isinstance(value, dict):
        if {"trials", "max_error"} <= set(value):
            yield value
        for v in value.values():
            yield from _verifications(v)
    elif isinstance(value, list):
        for v in value:
            yield from _verifications(v)


RESULT_JSONS = sorted(RESULTS.rglob("*.json"))


@pytest.mark.parametrize("path", RESULT_JSONS, ids=lambda p: str(p.relative_to(RESULTS)))
def test_results_hold_null_not_zero_for_what_was_not_measured(path):
    data = json.loads(path.read_text())
    assert not list(_zeros(data)), f"0 where a measurement is meant: {sorted(set(_zeros(data)))}"
    for v in _verifications(data):  # no trial run (an identical program): no error or tolerance measured
        if v["trials"] == 0:
            assert v["max_error"] is None and v.get("tolerance") is None, v


def test_the_zero_scan_finds_a_zero_where_a_measurement_is_meant():
    assert list(_zeros({"rows": [{"input_ms": 0.0, "count": 0}]})) == ["rows.input_ms"]
    assert list(_zeros({"pet_share": 0.0, "speedup": 1.0, "admitted": 0})) == ["pet_share"]

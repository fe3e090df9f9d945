"""The default-schedule derivation benchmark runs before and after side by side, and says what the
derivation did under each cost model."""

import json

from benchmarks import derive_default_bench


def test_a_transposed_conv_is_derived_only_where_it_can_pay(tmp_path):
    for cost in ("h100-roofline", "slow-windows"):
        assert derive_default_bench.main(["einnet_conv_transpose", "--cost", cost, "--reps", "1",
                                          "--out", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "derive_default.json").read_text())
    rows = {r["cost"]: r for r in data["results"]}
    assert set(rows) == {"h100-roofline", "slow-windows"}
    assert rows["h100-roofline"]["after"]["derive_matches"] == 0  # the roofline: no derivation can pay
    assert rows["slow-windows"]["after"]["derive_matches"] > 0
    assert rows["slow-windows"]["after"]["eops"] >= 1  # the derived form is extracted
    for r in rows.values():
        assert r["before"]["derive_matches"] == 0 and r["ratio"] > 0 and r["deterministic"]
        assert r["after"]["cost_after_us"] <= r["cost_before_us"]
    md = (tmp_path / "derive_default.md").read_text()
    assert md.count("| einnet_conv_transpose |") == 2
    assert len(data["meta"]["commit"]) == 40 and f"Commit `{data['meta']['commit']}`" in md  # the figures' code

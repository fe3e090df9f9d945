"""docs/rules.md lists exactly the default schedule (regenerate with `python scripts/rules_doc.py`)."""

import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_rules_doc_is_up_to_date():
    render = runpy.run_path(str(ROOT / "scripts" / "rules_doc.py"))["render"]
    assert (ROOT / "docs" / "rules.md").read_text() == render(), \
        "docs/rules.md is out of date: run `python scripts/rules_doc.py`"


def test_rules_doc_names_every_default_rule():
    from einsat.rewrites.schedule import default_rules

    text = (ROOT / "docs" / "rules.md").read_text()
    rules = default_rules()
    assert len(rules) >= 60
    assert all(f"`{r.name}`" in text for r in rules)

"""PET's partially equivalent mutants in the e-graph (PET §4–§6): see `generate.py`."""

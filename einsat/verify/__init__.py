"""Verification: numeric equivalence, exact finite-field testing and PET's corrector.

    from einsat.verify import equivalent, find_differences, correct
    report = equivalent(g1, g2)                  # random float inputs, tolerance from op count/dtype
    diffs = find_differences(original, mutant)   # PET §5: boxes, Theorems 1 and 2, mod 2^31-1
    fixed = correct(original, mutant, diffs)     # the mutant with its wrong regions recomputed

PET's part (boxes and splits, field evaluation and its rules, the corrector, corrections,
regions) imports `einsat.ir` alone, so a rewrite generator may call it; numeric equivalence
(`numeric.py`) runs programs on `einsat.runtime`. `tests/test_layering.py` holds it to that.
"""

from einsat.verify.correction import correct, restrict
from einsat.verify.corrector import Differences, find_differences
from einsat.verify.field import NotMultilinearError, P
from einsat.verify.numeric import NumericReport, equivalent
from einsat.verify.regions import Region

__all__ = ["Differences", "NotMultilinearError", "NumericReport", "P", "Region", "correct", "equivalent",
           "find_differences", "restrict"]

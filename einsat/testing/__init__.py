"""Testing helpers for einsat users and einsat's own tests: hypothesis strategies of shapes,
attributes, programs and mutant pairs (`einsat.testing.strategies`)."""

"""Testing helpers for einsat users and einsat's own tests: hypothesis strategies of shapes,
attributes, programs and mutant pairs (`einsat.testing.strategies`), checks of rewrite rules
(`einsat.testing.rules`: both sides on NumPy, the rule in an e-graph) and of exported e-graphs
(`einsat.testing.egraphs`), the fuzzer behind `einsat fuzz` (`einsat.testing.fuzz`), and a
planted wrong rewrite (`einsat.testing.plant.perturb`: one node slightly off) to show that a
verification could have failed."""

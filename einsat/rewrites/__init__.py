"""Rewrites: fully equivalent algebra (`algebra`), post-optimizations (`post`), and the default
schedule (`schedule`). PET's mutants (`mutate`) and EinNet's derivations (`derive`) join as
generators."""

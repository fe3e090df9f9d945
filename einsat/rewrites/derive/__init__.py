"""EinNet's derivations (OSDI'23 §3–§6) in einsat's e-graph.

Operators become tensor-algebra expressions (`OpDef.expression`); a distance-guided search
(`search`) applies the intra-expression rules (`rules`, enumerated by `steps`) and instantiates
the results (`instantiate`): operators matched by the iterator mapping table (`match`, with the
input layouts of `layouts`) and eOperators for the memory-bound rest. The inter-expression rules
(splitting, merging, fusion) are in `inter`; the generator that unions every derived program into
its source's e-class is in `generator`. Derivation states stay in Python: only instantiated
programs enter the e-graph.
"""

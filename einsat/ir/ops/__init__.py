"""Op definitions, one module per family. Importing this package fills the registry."""

from einsat.ir.ops import (  # noqa: F401
    banded, conv, conv_transpose, elementwise, layout, linear, normalization, opaque, pooling, reduce,
    slicing, special,
)
from einsat.ir.ops import control, extrema, math, views  # noqa: F401  (functionalization, kernels)
from einsat.ir.ops import fused  # noqa: F401  (conv/matmul epilogues, made by rewrites)

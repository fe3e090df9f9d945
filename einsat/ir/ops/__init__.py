"""Op definitions, one module per family. Importing this package fills the registry.

Registration order matters only where two ops share an ONNX op type: the first registered
imports it (e.g. `matmul` before the export-only `batchmatmul`)."""

from einsat.ir.ops import (  # noqa: F401
    attention,  # scaled dot-product attention, made by rewrites
    banded,
    control,  # functionalization: loop and if
    conv,
    conv_transpose,
    einsum,
    elementwise,
    eop,  # EinNet's eOperators: nodes carrying their expression
    extrema,
    fused,  # conv/matmul epilogues, made by rewrites
    indexing,
    layout,
    linear,
    math,
    normalization,
    opaque,
    packed_attention,  # attention of packed Q/K/V projections (onnxruntime's contrib Attention)
    pooling,
    reduce,
    rotary,  # rotary position embedding (Llama's), made by rewrites
    skip_norm,  # a residual sum and its norm (onnxruntime's contrib ops)
    slicing,
    special,
    views,  # functionalization: access and assign
)

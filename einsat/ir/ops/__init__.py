"""Op definitions, one module per family. Importing this package fills the registry."""

from einsat.ir.ops import conv, elementwise, linear  # noqa: F401

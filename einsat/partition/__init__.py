"""Big models: partition, reuse what repeats, optimize in parallel (PET §6.1).

A large program is not grown as one e-graph: `einsat.optimize` cuts it (above
`Partitioning.above` nodes) into pieces at boundaries that lose little, optimizes each distinct
piece once (in a process pool, or on a Ray cluster), applies the result to every copy of a
repeated piece with the copy's own weights, verifies, and stitches the pieces back.

    from einsat.partition import Partitioning, partition
    pieces, cuts = partition(graph)                     # just the cut
    einsat.optimize(graph, partition=Partitioning(piece_nodes=48, executor="serial"))

See `partition.driver` (the steps), `partition.cut` (where it cuts), `partition.fingerprint`
(what "the same piece" means), `partition.rebind` and `partition.executors`.
"""

from einsat.partition.cut import Cut, Piece
from einsat.partition.driver import Partitioning, optimize_partitioned, partition, stitch
from einsat.partition.executors import EXECUTORS
from einsat.partition.fingerprint import Canonical, canonical
from einsat.partition.rebind import rebind
from einsat.partition.report import CutSummary, PartitionSummary, PieceSummary

__all__ = ["EXECUTORS", "Canonical", "Cut", "CutSummary", "PartitionSummary", "Partitioning", "Piece",
           "PieceSummary", "canonical", "optimize_partitioned", "partition", "rebind", "stitch"]

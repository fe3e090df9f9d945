"""What a partitioned optimization did: the pieces, the cuts, the reuse, the times (plain data)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class PieceSummary:
    index: int
    start: int                 # its nodes in the input's topological order: start..stop-1
    stop: int
    nodes: int
    fingerprint: str           # the first 12 hex digits of its structural fingerprint
    template: int              # the piece whose optimized program it uses (itself when optimized)
    cost_before: float
    cost_after: float
    seconds: float             # optimization (a template) or rebinding and verification (a copy)
    stop_reason: str | None = None   # its saturation's (templates)
    enodes: int | None = None
    verified: bool = False     # checked against the input piece on random inputs
    fallback: str = ""         # why a copy was optimized on its own after all

    @property
    def cache_hit(self) -> bool:
        return self.template != self.index


@dataclass
class CutSummary:
    after: int                 # index of the last node before the cut
    node: str
    values: list[str]          # the values crossing the cut
    producers: list[str]
    bytes: int
    modeled: float | None      # modeled cost of writing and reading them once (cost unit), if the model has a device
    forced: bool = False
    repeat: bool = False       # a repeated unit's edge, though not a candidate (`partition.cut.align`)


@dataclass
class PartitionSummary:
    pieces: list[PieceSummary]
    cuts: list[CutSummary]
    executor: str
    workers: int
    reuse: bool
    seconds: dict[str, float] = field(default_factory=dict)  # partition, optimize, rebind, stitch, verify

    @property
    def templates(self) -> int:
        return sum(1 for p in self.pieces if not p.cache_hit)

    @property
    def cache_hits(self) -> int:
        return sum(1 for p in self.pieces if p.cache_hit)

    def __str__(self) -> str:
        forced = sum(c.forced for c in self.cuts)
        repeat = sum(c.repeat for c in self.cuts)
        crossing = sum(c.bytes for c in self.cuts)
        modeled = [c.modeled for c in self.cuts if c.modeled is not None]
        lines = [f"{len(self.pieces)} pieces ({self.templates} optimized, {self.cache_hits} reused), "
                 f"{self.executor} with {self.workers} worker(s); {len(self.cuts)} cuts ({forced} forced"
                 + (f", {repeat} at a repeated unit's edge" if repeat else "") + "), "
                 f"{crossing / 1e6:.2f} MB crossing" + (f", modeled {sum(modeled):,.2f} to materialize" if modeled
                                                        else "")]
        for p in self.pieces:
            how = (f"reuses piece {p.template}" if p.cache_hit else
                   f"optimized, {p.stop_reason}, {p.enodes:,} e-nodes" if p.enodes is not None else "optimized")
            lines.append(f"  piece {p.index}: nodes {p.start}-{p.stop - 1} ({p.nodes}), {p.fingerprint}, {how}; "
                         f"cost {p.cost_before:,.2f} -> {p.cost_after:,.2f}, {p.seconds:.2f} s"
                         + (f"; {p.fallback}" if p.fallback else ""))
        return "\n".join(lines)

"""Cost models under which PET's forms are cheaper: stand-ins for cuDNN's algorithm choice.

PET's wins are cuDNN algorithm switches that equal FLOPs hide from `RooflineCost` (Table 4):
the conv [1, 48, 38, 38] * [64, 48, 5, 5] takes 90 µs (implicit GEMM), as [16, 48, 10, 10]
tiles 51 µs (FFT); the dilated conv [1, 512, 14, 14] * [256, 512, 3, 3] takes 153 µs (no
Winograd for dilation), the regular conv of those shapes 79 µs (Winograd). `StubProfile` is a
profile database holding such measured times by conv signature (input shape, weight shape,
dilation, groups); a conv it does not list runs at the rate of the slowest one it lists (µs per
FLOP, plus a launch), so a mutant is cheaper only where the table says so. `paper_cost(times)`
prices convs so and everything else (corrections included) with the H100 roofline.
"""

from einsat.extract.cost import ProfiledCost, RooflineCost
from einsat.extract.devices import H100
from einsat.ir import Op, opdef

TABLE_4 = {
    ((1, 48, 38, 38), (64, 48, 5, 5), (1, 1), 1): 90.0,
    ((16, 48, 10, 10), (64, 48, 5, 5), (1, 1), 1): 51.0,
    ((1, 512, 14, 14), (256, 512, 3, 3), (2, 2), 1): 153.0,
    ((1, 512, 14, 14), (256, 512, 3, 3), (1, 1), 1): 79.0,
}


class StubProfile:
    """`lookup` for `ProfiledCost`: the time of a conv whose signature is listed, else None."""

    def __init__(self, times: dict[tuple, float]):
        self.times = times
        self.rate = max(us / _flops(key) for key, us in times.items())  # µs per FLOP

    def lookup(self, op, attrs, ins, outs):
        if op is not Op.CONV:
            return None
        key = (ins[0].shape, ins[1].shape, tuple(attrs["dilation"]), attrs["groups"])
        return self.times.get(key, H100.launch_us + self.rate * opdef(op).flops(ins, outs, attrs))


def _flops(key) -> float:
    """A listed conv's FLOPs (stride 1, 'same' output: the input's spatial size)."""
    (n, c, *spatial), (f, cg, *kernel), _, groups = key
    out = n * f
    for s in spatial:
        out *= s
    k = cg
    for s in kernel:
        k *= s
    return 2.0 * out * k


def paper_cost(times: dict[tuple, float] = TABLE_4) -> ProfiledCost:
    return ProfiledCost(StubProfile(times), RooflineCost("h100"), name="pet-table-4")

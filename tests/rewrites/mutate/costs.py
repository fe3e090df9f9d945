"""Cost models under which PET's forms are cheaper: stand-ins for cuDNN's algorithm choice.

PET's wins are cuDNN algorithm switches that equal FLOPs hide from `RooflineCost` (Table 4):
the conv [1, 48, 38, 38] * [64, 48, 5, 5] takes 90 µs (implicit GEMM), as [16, 48, 10, 10]
tiles 51 µs (FFT); the dilated conv [1, 512, 14, 14] * [256, 512, 3, 3] takes 153 µs (implicit
GEMM: no Winograd for dilation), the regular conv of those shapes 79 µs (Winograd).

`StubProfile(times)` is a profile database (`lookup`) holding such measured times by conv
signature (input shape, weight shape, dilation, groups). A conv it does not list runs at the
rate (µs per FLOP, plus a launch) of the slowest listed conv of its kind (kernel shape, dilated
or not): corrections are small convs of the original's kind, and a mutant is cheaper only
where the table says so. `paper_cost(times)` prices convs so and every other op with the H100
roofline.
"""

from einsat.extract.cost import ProfiledCost, RooflineCost
from einsat.extract.devices import H100
from einsat.ir import Op, TensorType, opdef

TABLE_4 = {
    ((1, 48, 38, 38), (64, 48, 5, 5), (1, 1), 1): 90.0,
    ((16, 48, 10, 10), (64, 48, 5, 5), (1, 1), 1): 51.0,
    ((1, 512, 14, 14), (256, 512, 3, 3), (2, 2), 1): 153.0,
    ((1, 512, 14, 14), (256, 512, 3, 3), (1, 1), 1): 79.0,
}


def _kind(weight_shape, dilation) -> tuple:
    return tuple(weight_shape[2:]), any(d > 1 for d in dilation)


def _flops(key) -> float:
    """A listed conv's FLOPs (stride 1, 'same' padding: the output has the input's spatial size)."""
    x, w, dilation, groups = key
    ins = [TensorType(x), TensorType(w)]
    out = TensorType((x[0], w[0]) + tuple(x[2:]))
    return opdef(Op.CONV).flops(ins, [out], {"groups": groups, "dilation": dilation})


class StubProfile:
    """`lookup` for `ProfiledCost` (see the module doc)."""

    def __init__(self, times: dict[tuple, float]):
        self.times = times
        self.rates: dict[tuple, float] = {}
        for key, us in times.items():
            kind = _kind(key[1], key[2])
            self.rates[kind] = max(self.rates.get(kind, 0.0), us / _flops(key))
        self.slowest = max(self.rates.values())

    def lookup(self, op, attrs, ins, outs):
        if op is not Op.CONV:
            return None
        key = (ins[0].shape, ins[1].shape, tuple(attrs["dilation"]), attrs["groups"])
        if key in self.times:
            return self.times[key]
        rate = self.rates.get(_kind(ins[1].shape, attrs["dilation"]), self.slowest)
        return H100.launch_us + rate * opdef(op).flops(ins, outs, attrs)


def paper_cost(times: dict[tuple, float] = TABLE_4) -> ProfiledCost:
    return ProfiledCost(StubProfile(times), RooflineCost("h100"), name="stub-profile")

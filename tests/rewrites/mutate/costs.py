"""Cost models under which PET's forms are cheaper: stand-ins for cuDNN's algorithm choice.

PET's wins are cuDNN algorithm switches that equal FLOPs hide from `RooflineCost` (Table 4):
the conv [1, 48, 38, 38] * [64, 48, 5, 5] takes 90 µs (implicit GEMM), as [16, 48, 10, 10]
tiles 51 µs (FFT); the dilated conv [1, 512, 14, 14] * [256, 512, 3, 3] takes 153 µs (implicit
GEMM: no Winograd for dilation), the regular conv of those shapes 79 µs (Winograd).

`StubProfile(times)` is a cost model holding such measured times by conv signature (input
shape, weight shape, dilation, groups), or for other ops (without attributes) by (op, input
shapes...). An op it does not list runs at the rate (µs per FLOP, plus a launch) of the slowest
listed op of its kind (a conv's kernel shape and whether it is dilated; another op's name):
corrections are small convs of the original's kind, and a mutant is cheaper only where the
table says so. Ops of kinds it does not list are priced by the H100 roofline.
"""

from einsat.cost.devices import H100
from einsat.cost.model import RooflineCost
from einsat.ir import Op, TensorType, opdef

TABLE_4 = {
    ((1, 48, 38, 38), (64, 48, 5, 5), (1, 1), 1): 90.0,
    ((16, 48, 10, 10), (64, 48, 5, 5), (1, 1), 1): 51.0,
    ((1, 512, 14, 14), (256, 512, 3, 3), (2, 2), 1): 153.0,
    ((1, 512, 14, 14), (256, 512, 3, 3), (1, 1), 1): 79.0,
}


def _kind(op, ins, attrs) -> tuple:
    if op is Op.CONV:
        return tuple(ins[1].shape[2:]), any(d > 1 for d in attrs["dilation"])
    return (op,)


def _listed(key) -> tuple:
    """(op, input types, attrs, FLOPs) of a listed signature (a conv: stride 1, 'same' padding)."""
    if isinstance(key[0], Op):
        op, ins, attrs = key[0], [TensorType(s) for s in key[1:]], {}
        outs = opdef(op).infer(ins, attrs)
    else:
        (x, w, dilation, groups), op = key, Op.CONV
        ins, attrs = [TensorType(x), TensorType(w)], {"groups": groups, "dilation": dilation}
        outs = [TensorType((x[0], w[0]) + tuple(x[2:]))]
    return op, ins, attrs, opdef(op).flops(ins, outs, attrs)


class StubProfile(RooflineCost):
    """Listed times, rates of their kinds, the roofline for the rest (see the module doc)."""

    def __init__(self, times: dict[tuple, float]):
        super().__init__("h100")
        self.name = "stub-profile"
        self.times = times
        self.rates: dict[tuple, float] = {}
        for key, us in times.items():
            op, ins, attrs, flops = _listed(key)
            kind = _kind(op, ins, attrs)
            self.rates[kind] = max(self.rates.get(kind, 0.0), us / flops)

    def node_cost(self, op, attrs, ins, outs):
        measured = self.lookup(op, attrs, ins, outs)
        return super().node_cost(op, attrs, ins, outs) if measured is None else measured

    def lookup(self, op, attrs, ins, outs):
        if op is Op.CONV:
            key = (ins[0].shape, ins[1].shape, tuple(attrs["dilation"]), attrs["groups"])
        else:
            key = (op,) + tuple(t.shape for t in ins if t is not None)
        if key in self.times:
            return self.times[key]
        rate = self.rates.get(_kind(op, ins, attrs))
        return None if rate is None else H100.launch_us + rate * opdef(op).flops(ins, outs, attrs)


def paper_cost(times: dict[tuple, float] = TABLE_4) -> StubProfile:
    return StubProfile(times)

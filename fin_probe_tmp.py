import sys, time
sys.path.insert(0, ".")
from benchmarks.workloads import build
from einsat.ir.registry import Op
from einsat.ir.expr.measure import is_memory_bound
from einsat.ir.expr.printer import fingerprint
from einsat.rewrites.derive.search import SearchLimits, derive
DERIVED = {Op.CONV, Op.CONV_TRANSPOSE, Op.G2BMM, Op.GBMM}
lim = SearchLimits(max_states=int(sys.argv[1]), deadline_s=float("inf"))
for name in sys.argv[2:]:
    g = build(name)
    seen = {}
    tot_t = 0; tot_s = 0
    for n in g.nodes:
        if n.op not in DERIVED: continue
        types = [g.types[i] for i in n.inputs if i]
        if len(types) != len([i for i in n.inputs]): pass
        e = n.definition.expression(types, n.attrs)
        if e is None or is_memory_bound(e, [t.shape for t in types]): continue
        const = frozenset(k for k, i in enumerate(n.inputs) if i in g.weights)
        key = (fingerprint(e), tuple(types), const)
        if key in seen: continue
        t = time.perf_counter()
        r = derive(e, types, const, lim, flops=n.definition.flops(types, n.definition.infer(types, n.attrs), n.attrs))
        dt = time.perf_counter() - t
        seen[key] = (r.states, dt, r.stop, len(r.candidates))
        tot_t += dt; tot_s += r.states
        k = n.attrs.get("kernel_shape") or (g.types[n.inputs[1]].shape if n.op is Op.CONV else "")
        print(f"  {name} {n.op.value} {[t.shape for t in types]} {dict((a, v) for a, v in n.attrs.items() if a in ('stride','dilation','groups'))}: states {r.states} {dt:.2f}s {r.stop} cands {len(r.candidates)}", flush=True)
    print(f"{name}: {len(seen)} distinct, {tot_s} states, {tot_t:.1f}s", flush=True)

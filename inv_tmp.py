import os, sys
os.environ["XDG_CACHE_HOME"] = "/tmp/bench2/cache"
import einsat
from einsat import measure
from benchmarks.workloads.zoo import zoo_model
from benchmarks.workloads import build
g = zoo_model(sys.argv[1][4:]) if sys.argv[1].startswith("zoo_") else build(sys.argv[1])
measure_check = measure.check_measured
measure.check_measured = lambda m, a, b, reps: measure_check(m, a, b, 3)
r = einsat.optimize(g, cost="cpu")
rep = r.report
print("extraction cost", rep.extraction.starts, "measured", rep.measured and rep.measured["predicted_ms"])
b, a = rep.cost_by_op_before, rep.cost_by_op_after
from einsat.extract.models import cost_model
m = cost_model("cpu")
res = r.graph
print(rep.ops_before, rep.ops_after)

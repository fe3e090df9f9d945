import time, einsat, sys
from einsat.partition import partition, Partitioning, canonical
name = sys.argv[1]
shapes = {"input_ids": (1, 32), "attention_mask": (1, 32), "token_type_ids": (1,32)}
g = einsat.load_onnx(f"tests/data/models/hf_{name}.onnx", fill_weights="random", input_shapes={k:v for k,v in shapes.items() if not (name=="gpt2" and k=="token_type_ids")})
print(len(g.nodes))
t=time.time()
pieces, cuts = partition(g, Partitioning())
print("partition s", time.time()-t)
keys=[canonical(p.graph).key[:8] for p in pieces]
for p,k in zip(pieces,keys): print(p.index, p.start, p.stop, p.stop-p.start, k, len(p.graph.inputs), len(p.graph.outputs))
for c in cuts: print(c)

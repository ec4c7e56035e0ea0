"""Worker 1 dies (no finalize, no word) after 3 steps; worker 0 must get a
Python exception from step() within the timeout, naming the dead worker.
Worker 0 writes what it saw to OUT_DIR/worker0.json, worker 1 its pid."""

import os
import sys
import time

import strata

strata.init()

import torch  # noqa: E402

import strata.torch as st  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

out = sys.argv[1]
common.setup_torch()
me = st.worker_index()
if me == 1:
    common.save(out, 1, {"pid": os.getpid(), "rank": st.rank()})
model = common.Net()
opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                              model.named_parameters())
seen = {"error": None}
last_good = time.monotonic()
for step in range(100000):
    if me == 1 and step == 3:
        os._exit(0)  # dies as a killed process would: no finalize
    try:
        opt.zero_grad()
        x, y = common.batch(me, step)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        last_good = time.monotonic()
    except st.StrataError as e:
        seen = {"error": str(e), "class": type(e).__name__, "name": e.name,
                "seconds": time.monotonic() - last_good, "step": step}
        break
common.save(out, me, seen)
try:
    st.finalize()
except st.StrataError:
    pass

"""One script for every launcher: strata.init() makes ranks below
STRATA_NUM_AGGREGATORS serve and exit; the workers train a few BSP steps and
write their parameters to OUT_DIR/worker<i>.json."""

import os
import sys

import strata

strata.init()  # aggregators serve here, then exit

import torch  # noqa: E402  (workers only)

import strata.torch as st  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

common.setup_torch()
torch.manual_seed(40 + st.worker_index())
model = common.Net()
opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                              model.named_parameters())
for step in range(5):
    opt.zero_grad()
    x, y = common.batch(st.worker_index(), step)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
common.save(sys.argv[1], st.worker_index(),
            {"params": common.flat(model.parameters()).tolist(),
             "workers": st.num_workers(), "rank": st.rank()})
st.finalize()

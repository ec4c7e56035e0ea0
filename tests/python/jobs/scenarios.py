"""One job, many contexts: every scenario of tests/python/test_training.py.

Run by every rank under strata-run --spmd (2 workers, 1 aggregator): each
scenario joins a new job (its own coordinator file), aggregator ranks serve
it, workers train and record what the tests check in OUT_DIR/worker<i>.json.
Aggregator ranks never import torch.
"""

import argparse
import copy
import os
import sys
import time
import traceback

import strata

SCENARIOS = ["bsp", "resume", "lr_schedule", "sum", "many_requests",
             "extra_pass", "ssp", "asp", "gssp", "gssp_gdtopk", "esync",
             "fedavg"]
# Run by tests/python/test_zero_copy.py with two aggregators: a model of
# several partitions, spanning tensors, on both.
ZERO_COPY = {"STRATA_PARTITION_BYTES": "4096"}
# Hidden units: about 20 KB of parameters (with buffers), 6 partitions.
WIDE = {"zcopy": 64, "zcopy_sum": 256}
# Run by tests/python/test_grad_edits.py: gradients edited between backward
# and step() (clipping), under each mode.
GRAD_EDITS = ["clip_sum", "clip_local", "clip_fedavg", "edit_unsynced"]
MAX_NORM = 0.25  # below every step's gradient norm here: each step clips
SETTINGS = {
    "bsp": {"STRATA_POLICY": "bsp", "STRATA_LR": "0.05",
            "STRATA_MOMENTUM": "0.9", "STRATA_WEIGHT_DECAY": "0.001"},
    "resume": {"STRATA_POLICY": "bsp"},
    "lr_schedule": {"STRATA_POLICY": "bsp", "STRATA_LR": "0.1",
                    "STRATA_MOMENTUM": "0.9"},
    "sum": {"STRATA_POLICY": "bsp", "STRATA_OPTIMIZER": "sum"},
    "many_requests": {"STRATA_POLICY": "bsp", "STRATA_OPTIMIZER": "sum"},
    "extra_pass": {"STRATA_POLICY": "bsp", "STRATA_LR": "0.05"},
    "ssp": {"STRATA_POLICY": "ssp", "STRATA_STALENESS": "2",
            "STRATA_LR": "0.1"},
    "asp": {"STRATA_POLICY": "asp", "STRATA_LR": "0.1"},
    "gssp": {"STRATA_POLICY": "gssp", "STRATA_LR": "0.1"},
    "gssp_gdtopk": {"STRATA_POLICY": "gssp", "STRATA_GDTOPK": "1",
                    "STRATA_LR": "0.1"},
    "esync": {"STRATA_POLICY": "esync"},
    "fedavg": {"STRATA_POLICY": "fedavg", "STRATA_FEDAVG_STEPS": "4"},
}
SETTINGS["zcopy"] = dict(SETTINGS["bsp"], **ZERO_COPY)
SETTINGS["zcopy_sum"] = dict(SETTINGS["sum"], **ZERO_COPY)
SETTINGS["clip_sum"] = SETTINGS["sum"]
SETTINGS["clip_local"] = {"STRATA_POLICY": "bsp", "STRATA_LR": "0.05",
                          "STRATA_MOMENTUM": "0.9"}
SETTINGS["clip_fedavg"] = {"STRATA_POLICY": "fedavg",
                           "STRATA_FEDAVG_STEPS": "3"}
SETTINGS["edit_unsynced"] = SETTINGS["extra_pass"]


def in_block(opt, name, tensor):
    """Whether tensor lies in the wrapper's block of gradients ("_grads") or
    of parameters ("_params")."""
    block = getattr(opt, name, None)
    return tensor is not None and block is not None and block.holds(tensor)


def zero_copy_facts(ctx, opt, model, buffers=False):
    """Where the tensors live and what the pushes moved: with zero copy over
    shm every pushed byte is read in place, none copied."""
    m = ctx.metrics()
    pushed = list(model.parameters()) + \
        [b for b in model.buffers() if buffers and b.is_floating_point()]
    return {"bytes_pushed": m["bytes_pushed"],
            "in_place_bytes": m["in_place_bytes"],
            "registered_bytes": sum(t.numel() * t.element_size()
                                    for t in pushed),
            "grads_in_block": all(in_block(opt, "_grads", p.grad)
                                  for p in model.parameters()),
            "params_in_block": all(in_block(opt, "_params", p)
                                   for p in model.parameters())}


def reference_step(ref, ref_opt, common, torch, step, workers, halves=False):
    """A single-process step on every worker's batch of `step`: the mean of
    their gradients (each over two half-batches with halves), then SGD."""
    grads = []
    for w in range(workers):
        ref.zero_grad()
        x, y = common.batch(w, step)
        for part in ((slice(0, 16), slice(16, 32)) if halves
                     else (slice(0, 32),)):
            torch.nn.functional.cross_entropy(ref(x[part]),
                                              y[part]).backward()
        grads.append([p.grad.clone() if p.grad is not None
                      else torch.zeros_like(p) for p in ref.parameters()])
    for i, p in enumerate(ref.parameters()):
        p.grad = sum(g[i] for g in grads) / workers
    ref_opt.step()


def against_reference(out, common, model, ref):
    """model's parameters, and their largest difference from ref's."""
    params = common.flat(model.parameters())
    out["params"] = params.tolist()
    out["ref_diff"] = float((params - common.flat(ref.parameters()))
                            .abs().max())


def run_bsp(ctx, out, common, torch, st, hidden=None):
    """Exact BSP against a single-process reference, through the pitfalls:
    an unused layer, zero_grad(set_to_none=True), two backward passes per
    step, evaluation between steps; mismatched optimizers first."""
    lr, momentum, wd = 0.05, 0.9, 0.001
    hidden = hidden or common.HIDDEN
    torch.manual_seed(10 + ctx.worker_index)  # differs: commit must fix it
    model = common.Net(unused=True, hidden=hidden)
    params = list(model.parameters())
    for what, inner in (
            ("lr", torch.optim.SGD(params, lr=0.5)),
            ("momentum", torch.optim.SGD(params, lr=lr, momentum=0.5,
                                         weight_decay=wd)),
            ("weight_decay", torch.optim.SGD(params, lr=lr,
                                             momentum=momentum)),
            ("nesterov", torch.optim.SGD(params, lr=lr, momentum=momentum,
                                         weight_decay=wd, nesterov=True)),
            ("adam", torch.optim.Adam(params, lr=lr, weight_decay=wd))):
        try:
            st.DistributedOptimizer(inner, model.named_parameters(),
                                    context=ctx)
            out["mismatch_" + what] = "accepted"
        except st.StrataError as e:
            out["mismatch_" + what] = str(e)
    # A wrapping the library refuses (a name too long for it) gives the
    # tensors their own memory back: the blocks it had taken are freed.
    before = common.flat(model.parameters())
    try:
        st.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum,
                            weight_decay=wd),
            [("x" * 300 + n, p) for n, p in model.named_parameters()],
            context=ctx)
        out["long_name"] = "accepted"
    except st.StrataError as e:
        out["long_name"] = str(e)
    out["long_name_diff"] = float((common.flat(model.parameters()) -
                                   before).abs().max())
    out["long_name_no_grads"] = all(p.grad is None
                                    for p in model.parameters())
    opt = st.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum,
                        weight_decay=wd),
        model.named_parameters(), backward_passes_per_step=2, context=ctx)
    # The reference: worker 0's initial model, every worker's gradients.
    torch.manual_seed(10)
    ref = common.Net(unused=True, hidden=hidden)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=lr, momentum=momentum,
                              weight_decay=wd)
    out["initial_diff"] = float((common.flat(model.parameters()) -
                                 common.flat(ref.parameters())).abs().max())
    evals = []
    steps = 8
    for step in range(steps):
        opt.zero_grad(set_to_none=(step % 3 == 1))
        x, y = common.batch(ctx.worker_index, step)
        for half in (slice(0, 16), slice(16, 32)):
            torch.nn.functional.cross_entropy(model(x[half]),
                                              y[half]).backward()
        opt.step()
        if step % 3 == 2:  # evaluation between steps
            evals.append(common.accuracy(model, common.test_set()))
        reference_step(ref, ref_opt, common, torch, step, ctx.num_workers,
                       halves=True)
    params = common.flat(model.parameters())
    out["params"] = params.tolist()
    out["ref_diff"] = float((params - common.flat(ref.parameters())).abs().max())
    out["unused_grad_is_buffer"] = model.unused.weight.grad is not None
    out["evals"] = evals
    out["clock"] = ctx.clock
    out.update(zero_copy_facts(ctx, opt, model))
    ckpt = os.path.join(out["dir"], "bsp-checkpoint.pt")
    if ctx.worker_index == 0 and hidden == common.HIDDEN:
        torch.save(model.state_dict(), ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)


def run_resume(ctx, out, common, torch, st):
    """A checkpoint loaded before wrapping is what every worker starts
    from, and a state_dict saved after finalize is the trained model."""
    ckpt = os.path.join(out["dir"], "bsp-checkpoint.pt")
    model = common.Net(unused=True)
    model.load_state_dict(torch.load(ckpt))
    saved = common.flat(model.parameters())
    opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                  model.named_parameters(), context=ctx)
    out["loaded_diff"] = float((common.flat(model.parameters()) -
                                saved).abs().max())
    x, y = common.batch(ctx.worker_index, 0)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    out["after_step"] = common.flat(model.parameters()).tolist()
    # Finalizing frees Strata's memory: the model must have left it, whole.
    ctx.finalize()
    out["after_finalize"] = common.flat(model.state_dict().values()).tolist()
    out["left_strata_memory"] = not any(
        in_block(opt, "_params", p) or in_block(opt, "_grads", p.grad)
        for p in model.parameters())
    out["acc_after_finalize"] = common.accuracy(model, common.test_set())


def run_lr_schedule(ctx, out, common, torch, st):
    """An LR scheduler with the aggregators' SGD: StepLR halves the rate
    every 2 steps; the model matches a reference that does the same."""
    torch.manual_seed(50)
    model = common.Net()
    opt = st.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        model.named_parameters(), context=ctx)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    ref = copy.deepcopy(model)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    ref_sched = torch.optim.lr_scheduler.StepLR(ref_opt, step_size=2,
                                                gamma=0.5)
    for step in range(6):
        opt.zero_grad()
        x, y = common.batch(ctx.worker_index, step)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        sched.step()
        reference_step(ref, ref_opt, common, torch, step, ctx.num_workers)
        ref_sched.step()
    against_reference(out, common, model, ref)
    out["lr"] = opt.param_groups[0]["lr"]


def run_sum(ctx, out, common, torch, st, hidden=None):
    """STRATA_OPTIMIZER=sum: a local Adam with two param groups and an LR
    scheduler, BatchNorm statistics averaged, against a reference."""
    hidden = hidden or common.HIDDEN
    torch.manual_seed(20 + ctx.worker_index)
    model = common.Net(bn=True, hidden=hidden)

    def make_opt(m):
        return torch.optim.Adam([
            {"params": list(m.fc1.parameters()) + list(m.bn.parameters()),
             "lr": 0.01},
            {"params": m.fc2.parameters(), "lr": 0.003}])
    opt = st.DistributedOptimizer(make_opt(model), model.named_parameters(),
                                  named_buffers=model.named_buffers(),
                                  context=ctx)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    torch.manual_seed(20)
    ref = common.Net(bn=True, hidden=hidden)
    ref_opt = make_opt(ref)
    ref_sched = torch.optim.lr_scheduler.StepLR(ref_opt, step_size=3,
                                                gamma=0.5)
    out["initial_diff"] = float((common.flat(model.parameters()) -
                                 common.flat(ref.parameters())).abs().max())
    for step in range(7):
        opt.zero_grad()
        x, y = common.batch(ctx.worker_index, step)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        sched.step()
        grads, stats = [], []
        for w in range(ctx.num_workers):
            copy_w = copy.deepcopy(ref)
            xw, yw = common.batch(w, step)
            torch.nn.functional.cross_entropy(copy_w(xw), yw).backward()
            grads.append([p.grad for p in copy_w.parameters()])
            stats.append([copy_w.bn.running_mean, copy_w.bn.running_var])
        for i, p in enumerate(ref.parameters()):
            p.grad = sum(g[i] for g in grads) / ctx.num_workers
        ref_opt.step()
        ref_sched.step()
        with torch.no_grad():
            ref.bn.running_mean.copy_(sum(s[0] for s in stats) / 2)
            ref.bn.running_var.copy_(sum(s[1] for s in stats) / 2)
    params = common.flat(model.parameters())
    stats = common.flat([model.bn.running_mean, model.bn.running_var])
    out["params"] = params.tolist()
    out["bn_stats"] = stats.tolist()
    out["ref_diff"] = float((params - common.flat(ref.parameters())).abs().max())
    out["bn_ref_diff"] = float((stats - common.flat(
        [ref.bn.running_mean, ref.bn.running_var])).abs().max())
    out["lr"] = [g["lr"] for g in opt.param_groups]
    out["clock"] = ctx.clock
    out.update(zero_copy_facts(ctx, opt, model, buffers=True))
    # The optimizer's state_dict round-trips (Adam's moments are local).
    state = opt.state_dict()
    fresh = make_opt(common.Net(bn=True, hidden=hidden))
    fresh.load_state_dict(state)
    out["state_steps"] = [float(s["step"]) for s in fresh.state.values()]


def run_many_requests(ctx, out, common, torch, st):
    """600 tensors pushed one request each, all outstanding at once (the
    pool once held 256: STRATA_ERR_AGAIN), then summed in place."""
    n, tensors = 600, []
    for i in range(n):
        t, address = st._strata_tensor(ctx, torch.empty(3))
        t.fill_(ctx.worker_index + 1)
        ctx.register(f"t{i}", address, address, 3, 0)
        tensors.append(t)
    ctx.commit()
    reqs = [ctx.push([i]) for i in range(n)]
    pull = ctx.pull()
    for r in reqs:
        r.wait()
    pull.wait()
    want = sum(range(1, ctx.num_workers + 1))
    out["outstanding"] = len(reqs)
    out["all_summed"] = all(float(t.min()) == want == float(t.max())
                            for t in tensors)


def run_extra_pass(ctx, out, common, torch, st):
    """A backward pass more than backward_passes_per_step before step()
    raises, naming the tensor; step() then ends the clock."""
    torch.manual_seed(40)
    model = common.Net()
    opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(),
                                                  lr=0.05),
                                  model.named_parameters(), context=ctx)
    x, y = common.batch(ctx.worker_index, 0)
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    try:
        torch.nn.functional.cross_entropy(model(x), y).backward()
        out["extra_pass"] = "accepted"
    except st.StrataError as e:
        out["extra_pass"] = str(e)
    opt.step()
    out["clock"] = ctx.clock


def run_converge(ctx, out, common, torch, st, policy):
    """Train a small classifier; record loss and accuracy before and after.
    fedavg's has BatchNorm, whose statistics every round averages."""
    torch.manual_seed(30 + ctx.worker_index)
    model = common.Net(bn=policy == "fedavg")
    if policy in ("esync", "fedavg"):
        inner = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    else:
        inner = torch.optim.SGD(model.parameters(), lr=0.1)
    opt = st.DistributedOptimizer(inner, model.named_parameters(),
                                  named_buffers=model.named_buffers(),
                                  epoch_steps=10, context=ctx)
    test = common.test_set()
    out["acc_before"] = common.accuracy(model, test)
    # Under gssp the two workers may form two groups: the one that ends
    # first keeps a snapshot of a run the other is still in (0.72-0.76
    # while the other was at 0.87-0.89 after 80 steps, twice in 5 runs at
    # load 20-24): twice the steps for a margin.
    steps = 160 if policy.startswith("gssp") else 80
    for step in range(steps):
        opt.zero_grad()
        x, y = common.batch(ctx.worker_index, step)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    out["acc_after"] = common.accuracy(model, test)
    if model.bn is not None:  # the last step (80 = 20 x 4) ended a round
        out["synced"] = opt.synced
        out["bn_stats"] = common.flat([model.bn.running_mean,
                                       model.bn.running_var]).tolist()
    out["group"] = ctx.group
    out["clock"] = ctx.clock


def worker_grads(ref, common, torch, step, workers, edit=None):
    """Each worker's gradients of `step` at ref's parameters, each worker's
    edited by edit(ref) if given."""
    grads = []
    for w in range(workers):
        ref.zero_grad()
        x, y = common.batch(w, step)
        torch.nn.functional.cross_entropy(ref(x), y).backward()
        if edit:
            edit(ref)
        grads.append([p.grad.clone() for p in ref.parameters()])
    return grads


def clip(torch, model):
    return float(torch.nn.utils.clip_grad_norm_(model.parameters(),
                                                MAX_NORM))


def run_clip_sum(ctx, out, common, torch, st):
    """Sum mode in Horovod's shape: synchronize(), clip the mean in p.grad,
    step() under skip_synchronize(); against a single-process reference
    that clips the mean of the same gradients. One step is skipped after
    synchronize() (as a gradient scaler skips one that overflowed), one
    steps without skip_synchronize() (no second clock). Then a clip
    without synchronize() raises, naming the tensors."""
    torch.manual_seed(60 + ctx.worker_index)
    model = common.Net()
    opt = st.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
        model.named_parameters(), context=ctx)
    torch.manual_seed(60)
    ref = common.Net()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    norms, ref_norms, steps, skipped = [], [], 6, 3
    for step in range(steps):
        opt.zero_grad()
        x, y = common.batch(ctx.worker_index, step)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.synchronize()
        norms.append(clip(torch, model))
        if step == 4:
            opt.step()  # after synchronize(): applies, no second clock
        elif step != skipped:
            with opt.skip_synchronize():
                opt.step()
        grads = worker_grads(ref, common, torch, step, ctx.num_workers)
        for i, p in enumerate(ref.parameters()):
            p.grad = sum(g[i] for g in grads) / ctx.num_workers
        ref_norms.append(clip(torch, ref))
        if step != skipped:
            ref_opt.step()
    against_reference(out, common, model, ref)
    out["norms"], out["ref_norms"] = norms, ref_norms
    out["clock"] = ctx.clock
    out["steps"] = steps
    out.update(zero_copy_facts(ctx, opt, model))
    # skip_synchronize() without synchronize() first
    opt.zero_grad()
    try:
        with opt.skip_synchronize():
            opt.step()
        out["unsynced_skip"] = "accepted"
    except st.StrataError as e:
        out["unsynced_skip"] = str(e)
    # clipping without synchronize(): the aggregators may be reading p.grad
    before = common.flat(model.parameters())
    x, y = common.batch(ctx.worker_index, steps)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    clip(torch, model)
    try:
        opt.step()
        out["unsynced_clip"] = "accepted"
    except st.StrataError as e:
        out["unsynced_clip"] = str(e)
    out["unsynced_clip_diff"] = float((common.flat(model.parameters()) -
                                       before).abs().max())
    out["clock_after_errors"] = ctx.clock


def run_clip_local(ctx, out, common, torch, st):
    """The aggregators' SGD with push_in_backward=False: each worker clips
    its own gradient before step() pushes it; the reference averages the
    clipped gradients. synchronize() is refused there, saying why."""
    torch.manual_seed(70)
    model = common.Net()
    opt = st.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
        model.named_parameters(), push_in_backward=False, context=ctx)
    try:
        opt.synchronize()
        out["synchronize"] = "accepted"
    except st.StrataError as e:
        out["synchronize"] = str(e)
    ref = copy.deepcopy(model)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    norms = []
    for step in range(6):
        opt.zero_grad()
        x, y = common.batch(ctx.worker_index, step)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        norms.append(clip(torch, model))
        opt.step()
        grads = worker_grads(ref, common, torch, step, ctx.num_workers,
                             edit=lambda m: clip(torch, m))
        for i, p in enumerate(ref.parameters()):
            p.grad = sum(g[i] for g in grads) / ctx.num_workers
        ref_opt.step()
    against_reference(out, common, model, ref)
    out["norms"] = norms
    out["clock"] = ctx.clock
    out.update(zero_copy_facts(ctx, opt, model))


def run_clip_fedavg(ctx, out, common, torch, st):
    """fedavg (rounds of 3 local steps) in Horovod's shape: synchronize()
    has nothing to do, the local step applies the clipped gradient, the
    round averages the models; against a reference doing the same."""
    torch.manual_seed(80)
    model = common.Net()
    opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                  model.named_parameters(), context=ctx)
    ref = copy.deepcopy(model)
    norms = []
    for step in range(6):
        opt.zero_grad()
        x, y = common.batch(ctx.worker_index, step)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.synchronize()
        norms.append(clip(torch, model))
        with opt.skip_synchronize():
            opt.step()
    for first in (0, 3):  # the reference: two rounds of 3 local steps
        local = []
        for w in range(ctx.num_workers):
            m = copy.deepcopy(ref)
            o = torch.optim.SGD(m.parameters(), lr=0.1)
            for step in range(first, first + 3):
                o.zero_grad()
                x, y = common.batch(w, step)
                torch.nn.functional.cross_entropy(m(x), y).backward()
                clip(torch, m)
                o.step()
            local.append(list(m.parameters()))
        with torch.no_grad():
            for i, p in enumerate(ref.parameters()):
                p.copy_(sum(m[i] for m in local) / ctx.num_workers)
    against_reference(out, common, model, ref)
    out["norms"] = norms
    out["synced"] = opt.synced


def run_edit_unsynced(ctx, out, common, torch, st):
    """The aggregators' SGD, gradients pushed from backward's hooks: a clip
    (in place) or a replaced p.grad before step() raises, naming the
    tensors, once the clock ended; the next step is a normal one."""
    torch.manual_seed(90)
    model = common.Net()
    opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(),
                                                  lr=0.05),
                                  model.named_parameters(), context=ctx)

    def step(n, edit):
        opt.zero_grad()
        x, y = common.batch(ctx.worker_index, n)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        edit()
        try:
            opt.step()
            return "accepted"
        except st.StrataError as e:
            return str(e)

    def replace():
        model.fc2.bias.grad = model.fc2.bias.grad * 2

    out["clipped"] = step(0, lambda: clip(torch, model))
    out["replaced"] = step(1, replace)
    out["plain"] = step(2, lambda: None)
    out["clock"] = ctx.clock


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", nargs="*", default=SCENARIOS,
                    choices=sorted(SETTINGS))
    args = ap.parse_args()
    coord = os.environ["STRATA_COORD_FILE"]
    results, failed = {}, False
    torch = common = st = None
    for k, name in enumerate(args.only):
        settings = dict(SETTINGS[name], STRATA_COORD_FILE=f"{coord}.{k}")
        ctx = strata.Context(settings)
        if not ctx.is_worker:
            ctx.serve()
            ctx.finalize()
            continue
        if torch is None:  # workers only
            import torch
            import strata.torch as st
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            import common
            common.setup_torch()
        out = {"dir": args.out}
        started = time.monotonic()
        try:
            if name in ("bsp", "resume", "lr_schedule", "sum",
                        "many_requests", "extra_pass") or \
                    name in GRAD_EDITS:
                globals()["run_" + name](ctx, out, common, torch, st)
            elif name in ("zcopy", "zcopy_sum"):
                run = run_bsp if name == "zcopy" else run_sum
                run(ctx, out, common, torch, st, hidden=WIDE[name])
            else:
                run_converge(ctx, out, common, torch, st, name)
            ctx.finalize()
        except Exception:
            out["error"] = traceback.format_exc()
            failed = True
            try:
                ctx.finalize()
            except strata.StrataError:
                pass
        out["seconds"] = time.monotonic() - started
        results[name] = out
        common.save(args.out, ctx.worker_index, results)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

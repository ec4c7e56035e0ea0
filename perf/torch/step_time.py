#!/usr/bin/python3
"""Step time of the AlexNet-like CNN with N workers: Strata against PyTorch
DDP over gloo, with the same processes, model, batch and local optimizer.

    PYTHONPATH=build/python /usr/bin/python3 perf/torch/step_time.py \\
        --workers 4 --rounds 3

Strata runs bsp with STRATA_OPTIMIZER=sum (the aggregator sums each
gradient, every worker divides by N and steps its own torch.optim.SGD): the
allreduce DDP does, through one strata-agg over shared memory. DDP runs
torch.nn.parallel.DistributedDataParallel over gloo on loopback (its default
25 MB buckets). Both start the same N python processes, seed the same
model, train on the same synthetic batches (the step time does not depend on
the data) with torch.set_num_threads(1), and time STEPS steps after WARMUP.
The rounds alternate Strata and DDP (the machine is shared: compare
medians), and the load average is printed with the figures.

A rank's report: the median wall time of a step, the CPU time per step of the
process, and the time inside the framework's communication (step() for
Strata; the backward pass minus a no-communication backward measured
first, for DDP: an estimate).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "..", "examples", "torch")


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--model", default="alexnet",
                    choices=("alexnet", "resnet18"))
    ap.add_argument("--only", choices=("strata", "ddp"))
    ap.add_argument("--json", help="write every rank's figures here")
    ap.add_argument("--rank-of", choices=("strata", "ddp"),
                    help=argparse.SUPPRESS)  # internal: run one rank
    ap.add_argument("--out", help=argparse.SUPPRESS)
    return ap.parse_args()


def train(args, model, step_fn, torch):
    """Warm up, then time args.steps steps; returns the rank's figures."""
    cpu = time.process_time()
    torch.manual_seed(0)
    x = torch.randn(args.batch, 1, 28, 28)
    y = torch.randint(0, 10, (args.batch,))
    walls, comm = [], []
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        c = step_fn(x, y)
        if i >= args.warmup:
            walls.append(time.perf_counter() - t0)
            comm.append(c)
    return {"wall_s": statistics.median(walls), "mean_s":
            statistics.fmean(walls), "comm_s": statistics.median(comm),
            "cpu_per_step_s": (time.process_time() - cpu) /
            (args.warmup + args.steps)}


def rank_strata(args, torch):
    import strata.torch as st
    from fashion_mnist import make_model
    torch.manual_seed(1)
    model = make_model(args.model, torch)
    opt = st.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
        model.named_parameters(), named_buffers=model.named_buffers())
    loss_fn = torch.nn.functional.cross_entropy

    def step(x, y):
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        t = time.perf_counter()
        opt.step()
        return time.perf_counter() - t
    res = train(args, model, step, torch)
    res["worker"] = st.worker_index()
    st.finalize()
    return res


def rank_ddp(args, torch):
    import torch.distributed as dist
    from fashion_mnist import make_model
    dist.init_process_group("gloo")
    torch.manual_seed(1)
    model = make_model(args.model, torch)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.functional.cross_entropy
    x = torch.randn(args.batch, 1, 28, 28)
    y = torch.randint(0, 10, (args.batch,))
    with ddp.no_sync():  # backward without communication, for the estimate
        local = []
        for _ in range(3):
            t = time.perf_counter()
            loss_fn(ddp(x), y).backward()
            local.append(time.perf_counter() - t)
        opt.zero_grad()
    local_bwd = min(local)

    def step(x, y):
        opt.zero_grad()
        out = ddp(x)
        t = time.perf_counter()
        loss_fn(out, y).backward()
        bwd = time.perf_counter() - t
        opt.step()
        return max(bwd - local_bwd, 0.0)
    dist.barrier()
    res = train(args, model, step, torch)
    res["worker"] = dist.get_rank()
    dist.destroy_process_group()
    return res


def run_rank(args):
    if args.rank_of == "strata":
        import strata
        strata.init()  # joins before torch loads; the aggregator serves here
    import torch
    torch.set_num_threads(1)
    sys.path.insert(0, EXAMPLES)
    res = (rank_strata if args.rank_of == "strata" else rank_ddp)(args,
                                                                  torch)
    with open(os.path.join(args.out, f"rank{res['worker']}.json"), "w") as f:
        json.dump(res, f)


def launch(args, kind, workdir):
    out = tempfile.mkdtemp(dir=workdir)
    me = [sys.executable, os.path.abspath(__file__), "--rank-of", kind,
          "--out", out, "--steps", str(args.steps), "--warmup",
          str(args.warmup), "--batch", str(args.batch), "--model", args.model]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    if kind == "strata":
        import strata._lib as lib
        run = os.path.join(os.path.dirname(os.path.dirname(
            os.path.realpath(lib.path))), "bin", "strata-run")
        env.update(STRATA_POLICY="bsp", STRATA_OPTIMIZER="sum")
        env.setdefault("STRATA_TIMEOUT_MS", "120000")  # loaded machines
        procs = [subprocess.Popen([run, "-n", str(args.workers), "-a", "1",
                                   "--"] + me, env=env)]
    else:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        procs = [subprocess.Popen(me, env=dict(
            env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r),
            WORLD_SIZE=str(args.workers))) for r in range(args.workers)]
    status = max(p.wait() for p in procs)
    ranks = []
    for r in range(args.workers):
        path = os.path.join(out, f"rank{r}.json")
        if os.path.exists(path):
            ranks.append(json.load(open(path)))
    if status or len(ranks) != args.workers:
        sys.exit(f"{kind}: the job failed (exit {status}, "
                 f"{len(ranks)} of {args.workers} ranks reported)")
    return ranks


def summary(ranks):
    """The job's step: the slowest rank's median (they wait for each other)."""
    return {"wall_s": max(r["wall_s"] for r in ranks),
            "cpu_per_step_s": statistics.fmean(r["cpu_per_step_s"]
                                               for r in ranks),
            "comm_s": statistics.fmean(r["comm_s"] for r in ranks)}


def main():
    args = parse_args()
    if args.rank_of:
        return run_rank(args)
    kinds = [args.only] if args.only else ["strata", "ddp"]
    rows, raw = {k: [] for k in kinds}, []
    with tempfile.TemporaryDirectory(prefix="strata-steptime-") as workdir:
        for r in range(args.rounds):
            for kind in (kinds if r % 2 == 0 else kinds[::-1]):
                load = os.getloadavg()[0]
                ranks = launch(args, kind, workdir)
                s = summary(ranks)
                s["load"] = load
                rows[kind].append(s)
                raw.append({"kind": kind, "round": r, "ranks": ranks,
                            "load": load})
                print(f"round {r} {kind:6s}: step {s['wall_s'] * 1e3:7.1f} ms"
                      f"  cpu/step {s['cpu_per_step_s'] * 1e3:6.1f} ms"
                      f"  comm {s['comm_s'] * 1e3:6.1f} ms  (load "
                      f"{load:.2f})", flush=True)
    print(f"\n{args.model}, {args.workers} workers, batch {args.batch}, "
          f"median of {args.rounds} rounds of {args.steps} steps:")
    med = {k: statistics.median(s["wall_s"] for s in v)
           for k, v in rows.items()}
    for k in kinds:
        print(f"  {k:6s} {med[k] * 1e3:7.1f} ms per step")
    if len(kinds) == 2:
        print(f"  Strata / DDP-gloo = {med['strata'] / med['ddp']:.2f}x "
              f"(target <= 1.0x)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": raw}, f, indent=1)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""ESync's rounds and BSP's steps to a test accuracy, counted in one process:
what bounds ESync's speed-up, measured independently of the load.

    /usr/bin/python3 perf/torch/esync_rounds.py --model lenet --batch 32 \\
        --steps 14,14,14,1 --weighting equal

The wall-time benchmark (time_to_accuracy.py) needs the x1 workers' compute
to fit in their padded step, which a loaded 2-core machine does not give
the AlexNet-like CNN. This counts instead: a round of ESync takes one step
of the slowest worker, as a BSP step does, so the speed-up that speeds
allow is BSP's steps to the target over ESync's rounds to it.

It runs examples/torch/fashion_mnist.py's arithmetic without the engine:
the same model, data shards and per-worker batch order, the same torch SGD
on each worker (its momentum kept across rounds, as strata.torch keeps the
wrapped optimizer's state). A round: every worker starts from the global
model and takes its --steps local steps (what the State Server gave each
worker in a measured run: "local steps per round" in the example's table);
the deltas are averaged with equal weights (the paper's eq. 7) or by local
steps (STRATA_ESYNC_WEIGHTING=steps), times --global-lr; with
--average-momentum the workers' momentum buffers are averaged too (local
momentum SGD as Yu et al. 2019 average it; strata.torch does not). BSP:
each step applies SGD with momentum to the mean gradient of one batch per
worker, as the aggregators do. Evaluation on --test-size images every
--eval-every rounds (steps), then every one once within --near of the
target, and --after more past it (how far the accuracy falls back after
the first crossing).
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "torch"))
import fashion_mnist as fm  # noqa: E402


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("alexnet", "resnet18", "lenet"),
                    default="alexnet")
    ap.add_argument("--steps", default="11,11,11,1",
                    help="esync: local steps of each worker in a round")
    ap.add_argument("--weighting", choices=("equal", "steps"),
                    default="equal")
    ap.add_argument("--global-lr", type=float, default=1.0)
    ap.add_argument("--reset-momentum", action="store_true",
                    help="esync: momentum from zero at every round")
    ap.add_argument("--average-momentum", action="store_true",
                    help="esync: average the momentum buffers at rounds")
    ap.add_argument("--after", type=int, default=0,
                    help="evaluate this many rounds past the target")
    ap.add_argument("--bsp", action="store_true",
                    help="count BSP's steps instead of ESync's rounds")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--target-acc", type=float, default=0.80)
    ap.add_argument("--test-size", type=int, default=1000)
    ap.add_argument("--eval-every", type=int, default=2)
    ap.add_argument("--near", type=float, default=0.05)
    ap.add_argument("--max", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default=fm.DATA_DIR)
    return ap.parse_args()


class Stream:
    """A worker's batches in the example's order: its shard, its own
    generator, a new permutation each epoch."""

    def __init__(self, x, y, seed, batch, torch):
        self.x, self.y, self.batch, self.torch = x, y, batch, torch
        self.g = torch.Generator().manual_seed(seed)
        self.order, self.i = None, 0

    def next(self):
        if self.order is None or self.i + self.batch > len(self.order):
            self.order = self.torch.randperm(len(self.y), generator=self.g)
            self.i = 0
        idx = self.order[self.i:self.i + self.batch]
        self.i += self.batch
        return self.x[idx], self.y[idx]


def run(args, torch):
    steps = [int(s) for s in args.steps.split(",")]
    workers = len(steps)
    ea = fm.parse_args(["--seed", str(args.seed), "--data", args.data,
                        "--test-size", str(args.test_size)])
    data = [fm.load_data(ea, w, workers, torch) for w in range(workers)]
    tx, ty = data[0][2], data[0][3]
    streams = [Stream(d[0], d[1], args.seed + w, args.batch, torch)
               for w, d in enumerate(data)]
    torch.manual_seed(args.seed)
    models = [fm.make_model(args.model, torch) for _ in range(workers)]
    for m in models[1:]:
        m.load_state_dict(models[0].state_dict())
    opts = [torch.optim.SGD(m.parameters(), lr=args.lr,
                            momentum=args.momentum) for m in models]
    loss_fn = torch.nn.functional.cross_entropy
    glob = [p.detach().clone() for p in models[0].parameters()]
    total = sum(steps)
    weights = [k / total if args.weighting == "steps" else 1 / workers
               for k in steps]
    acc, began, hit, seen = 0.0, time.monotonic(), None, []
    for n in range(1, args.max + 1):
        if args.bsp:  # one model: the mean gradient of every worker's batch
            opts[0].zero_grad()
            for s in streams:
                x, y = s.next()
                (loss_fn(models[0](x), y) / workers).backward()
            opts[0].step()
        else:
            deltas = []
            for w, m in enumerate(models):
                with torch.no_grad():
                    for p, g in zip(m.parameters(), glob):
                        p.copy_(g)
                if args.reset_momentum:
                    opts[w].state.clear()
                for _ in range(steps[w]):
                    x, y = streams[w].next()
                    opts[w].zero_grad()
                    loss_fn(m(x), y).backward()
                    opts[w].step()
                deltas.append([p.detach() - g
                               for p, g in zip(m.parameters(), glob)])
            if args.average_momentum:
                bufs = [[o.state[p]["momentum_buffer"] for p in m.parameters()]
                        for o, m in zip(opts, models)]
                for i in range(len(glob)):
                    mean = sum(b[i] for b in bufs) / workers
                    for b in bufs:
                        b[i].copy_(mean)
            for i, g in enumerate(glob):
                g.add_(sum(wt * d[i] for wt, d in zip(weights, deltas)),
                       alpha=args.global_lr)
            with torch.no_grad():
                for p, g in zip(models[0].parameters(), glob):
                    p.copy_(g)
        if n % args.eval_every and hit is None and \
                acc < args.target_acc - args.near:
            continue
        acc, loss = fm.evaluate(models[0], tx, ty, torch)
        unit = "step" if args.bsp else "round"
        print(f"{unit} {n:4d}  acc {acc:.4f}  loss {loss:.3f}  "
              f"({time.monotonic() - began:.0f} s, load "
              f"{os.getloadavg()[0]:.1f})", flush=True)
        if hit is None and acc >= args.target_acc:
            hit = n
        if hit is not None:
            seen.append(acc)
            if n >= hit + args.after:
                print(f"after the target: min {min(seen):.4f} "
                      f"mean {sum(seen) / len(seen):.4f}")
                return hit
    return hit


def main():
    args = parse_args()
    import torch
    torch.set_num_threads(1)
    n = run(args, torch)
    what = "bsp steps" if args.bsp else \
        f"esync rounds (local steps {args.steps}, {args.weighting} weights" \
        f", lr_g {args.global_lr:g})"
    print(f"{what} to {args.target_acc:.0%}: "
          f"{n if n else f'not in {args.max}'}")
    return 0 if n else 1


if __name__ == "__main__":
    sys.exit(main())

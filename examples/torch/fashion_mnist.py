#!/usr/bin/python3
"""Fashion-MNIST with a torchvision CNN, trained through Strata.

Under a launcher every rank runs this script: aggregators serve, workers
train with strata.torch.DistributedOptimizer under the job's STRATA_POLICY.

    STRATA_POLICY=gssp PYTHONPATH=build/python \\
        build/bin/strata-run -n 4 -a 1 -- /usr/bin/python3 examples/torch/fashion_mnist.py

Started directly, it is the driver: it launches one such job per policy
(strata-run next to the libstrata it loads), prints their progress and a
time-to-accuracy table, and draws accuracy against time:

    PYTHONPATH=build/python /usr/bin/python3 examples/torch/fashion_mnist.py \\
        --compare bsp,gssp,esync --speeds 1,1,1,8 --plot fmnist.png

Workers are slowed as strata-train's --speeds does: a worker with factor f
pads every step by sleeping until f x the base step time after it began, the
base lying above the real compute time, so its speed is its factor rather
than how the cores are shared. One worker reports, every --eval-every
seconds of training, the accuracy on a test subset: the slowest when one
is slowed, in its sleep (a copy of the model, piece by piece, taking no
step from anyone), or else worker 0 while every worker pauses (the pause
is not counted as training time).
"""

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

DATA_DIR = "/usr/share/datasets/fashion-mnist"
POLICIES = ("bsp", "ssp", "asp", "gssp", "esync", "fedavg")
LAUNCHER_VARS = ("STRATA_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                 "SLURM_PROCID", "RANK")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=("alexnet", "resnet18", "lenet"),
                    default="alexnet")
    ap.add_argument("--policy", choices=POLICIES,
                    help="driver: the one policy to run (default bsp)")
    ap.add_argument("--compare", help="driver: policies, comma-separated")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--aggregators", type=int, default=1)
    ap.add_argument("--speeds", default="",
                    help="slow-down factor per worker: 1,1,2,8 or 1x3,8x1")
    ap.add_argument("--base-ms", type=float, default=0,
                    help="step time of a x1 worker (0: the driver measures "
                         "a step and allows for the cores being shared)")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--train-size", type=int, default=0,
                    help="train on a seeded subset (0: all 60000)")
    ap.add_argument("--test-size", type=int, default=1000)
    ap.add_argument("--target-acc", type=float, default=0.80)
    ap.add_argument("--budget", type=float, default=120,
                    help="training seconds per policy")
    ap.add_argument("--bsp-budget", type=float,
                    help="driver: bsp's training seconds (default --budget)")
    ap.add_argument("--bsp-steps", type=int, default=0,
                    help="driver: bsp's steps to the target as counted by "
                         "perf/torch/esync_rounds.py --bsp; if bsp stops "
                         "short of the target, its time to it is modelled "
                         "as these steps x its measured step time")
    ap.add_argument("--stop-at-target", action="store_true",
                    help="end a policy's run once it reaches the target")
    ap.add_argument("--eval-every", type=float, default=5.0,
                    help="seconds of training between evaluations")
    ap.add_argument("--epoch-steps", type=int, default=20,
                    help="gssp: steps between the epoch ends that regroup")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default=DATA_DIR)
    ap.add_argument("--json", help="driver: write the results as JSON")
    ap.add_argument("--plot", help="driver: draw accuracy against time")
    ap.add_argument("--log", help="rank: write evaluations here (JSON lines)")
    ap.add_argument("--launcher", help="driver: strata-run to use")
    return ap.parse_args(argv)


def parse_speeds(text, workers):
    speeds = []
    for item in filter(None, text.split(",")):
        factor, _, count = item.partition("x")
        speeds += [float(factor)] * (int(count) if count else 1)
    speeds = speeds or [1.0] * workers
    if len(speeds) != workers or min(speeds) <= 0:
        sys.exit(f"--speeds {text}: need {workers} positive factors")
    return speeds


# ---- data and models (ranks) ----

IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
             "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def load_idx(path):
    import numpy as np
    with gzip.open(path, "rb") as f:
        raw = f.read()
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big")
             for i in range(dims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims) \
        .reshape(shape)


def prepare_data(data_dir, out_dir):
    """The driver decompresses the data set once, as raw uint8 arrays in the
    job's directory: every rank maps them instead of decompressing 30 MB."""
    import numpy as np
    for name in IDX_FILES:
        np.save(os.path.join(out_dir, name + ".npy"),
                load_idx(os.path.join(data_dir, name + ".gz")))


def idx_array(args, name):
    """A data set file as uint8: the driver's prepared copy, mapped, if the
    job has one; otherwise decompressed here."""
    import numpy as np
    prepared = os.path.join(os.environ.get("STRATA_EXT_PY_EXAMPLE_DIR", ""),
                            name + ".npy")
    if os.path.exists(prepared):
        return np.load(prepared, mmap_mode="r")
    return load_idx(os.path.join(args.data, name + ".gz"))


def load_data(args, worker, workers, torch):
    """This worker's shard of the (subset of the) training set and the test
    subset, normalized. Only those images are converted to float: the whole
    set took 110 s in four ranks at once on a loaded 2-core machine."""
    import numpy as np

    def images(name, rows):
        x = torch.from_numpy(np.array(idx_array(args, name)[rows]))
        return x.float().div_(255.0).sub_(0.2860).div_(0.3530).unsqueeze(1)

    def labels(name, rows):
        return torch.from_numpy(
            np.array(idx_array(args, name)[rows])).long()
    n = len(idx_array(args, IDX_FILES[1]))
    g = torch.Generator().manual_seed(args.seed)
    order = torch.randperm(n, generator=g)
    if args.train_size:
        order = order[:args.train_size]
    mine = order[worker::workers].numpy()  # this worker's shard
    test = slice(0, args.test_size)
    return images(IDX_FILES[0], mine), labels(IDX_FILES[1], mine), \
        images(IDX_FILES[2], test), labels(IDX_FILES[3], test)


def make_model(name, torch):
    nn = torch.nn
    if name == "resnet18":
        import torchvision
        m = torchvision.models.resnet18(num_classes=10)
        m.conv1 = nn.Conv2d(1, 64, kernel_size=7, stride=2, padding=3,
                            bias=False)  # one input channel
        return m
    if name == "lenet":  # LeNet-5: 61 k params, a few ms a step
        return nn.Sequential(
            nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(inplace=True), nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(16 * 5 * 5, 120), nn.ReLU(inplace=True),
            nn.Linear(120, 84), nn.ReLU(inplace=True), nn.Linear(84, 10))
    # AlexNet-like: 5 convolutions, 3 fully connected layers, 3.0 M params.
    return nn.Sequential(
        nn.Conv2d(1, 64, 3, padding=1), nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Conv2d(128, 256, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(256, 128, 3, padding=1), nn.ReLU(inplace=True),
        nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(128 * 3 * 3, 1024), nn.ReLU(inplace=True),
        nn.Dropout(0.5),
        nn.Linear(1024, 512), nn.ReLU(inplace=True), nn.Dropout(0.5),
        nn.Linear(512, 10))


def score(model, x, y, torch):
    """Correct answers and the summed loss of an evaluating model."""
    with torch.no_grad():
        out = model(x)
        return int((out.argmax(1) == y).sum()), float(
            torch.nn.functional.cross_entropy(out, y, reduction="sum"))


def evaluate(model, tx, ty, torch):
    was = model.training
    model.eval()
    correct, loss = 0, 0.0
    for i in range(0, len(ty), 250):
        c, s = score(model, tx[i:i + 250], ty[i:i + 250], torch)
        correct, loss = correct + c, loss + s
    model.train(was)
    return correct / len(ty), loss / len(ty)


def evaluator(speeds):
    """The worker that evaluates: the slowest (the lowest index of those),
    when it is slowed and so sleeps part of every step; worker 0 otherwise."""
    slow = max(range(len(speeds)), key=lambda w: (speeds[w], -w))
    return slow if speeds[slow] > min(speeds) else 0


class IdleEvaluation:
    """A copy of the global model, evaluated in pieces in the evaluating
    worker's sleep: a slowed worker's sleep stands for compute it does not
    have, so evaluating there takes no step from any worker. (Worker 0
    evaluating while every worker paused took the x1 workers' steps from
    every ESync round it fell in, while the slowest worker's sleep went on:
    1,000 test images cost the AlexNet-like CNN's CPU of 43-62 training
    steps, more than a round's 16 at 1,1,1,16. BSP's waits hid it.)"""

    def __init__(self, model, tx, ty, torch):
        import copy
        self.copy = copy.deepcopy(model).eval()
        self.tx, self.ty, self.torch = tx, ty, torch
        self.at = None  # what the copy was taken at, while it is evaluated
        self.per_image = None  # seconds, the latest pieces' average

    def take(self, model, at):
        with self.torch.no_grad():
            for mine, theirs in zip(self.copy.state_dict().values(),
                                    model.state_dict().values()):
                mine.copy_(theirs)
        self.at, self.done, self.correct, self.loss = at, 0, 0, 0.0

    def advance(self, deadline):
        """Evaluates pieces while the next fits before deadline (monotonic
        seconds, timed by the pieces before); (acc, loss, at) once the
        whole test subset is done."""
        n = len(self.ty)
        while self.at is not None and self.done < n:
            left = deadline - time.monotonic()
            fit = 0 if left <= 0 else \
                min(250, left / (1.25 * self.per_image)) \
                if self.per_image else 16  # a first piece, to time
            k = min(n - self.done, int(fit))
            if k < 1:
                if left > 0:  # a slow piece (a busy moment) ages out
                    self.per_image *= 0.8
                return None
            began = time.monotonic()
            part = slice(self.done, self.done + k)
            c, s = score(self.copy, self.tx[part], self.ty[part], self.torch)
            took = (time.monotonic() - began) / k
            self.per_image = took if self.per_image is None else \
                (self.per_image + took) / 2
            self.done, self.correct, self.loss = \
                self.done + k, self.correct + c, self.loss + s
        if self.at is None:
            return None
        at, self.at = self.at, None
        return self.correct / n, self.loss / n, at


class Pause:
    """Worker 0 pauses every worker while it evaluates, and stops them when
    it ends: files in a directory every rank of this host sees; the others
    look at a step's start."""

    def __init__(self, directory):
        self.path = os.path.join(directory, "pause") if directory else None
        self.end = os.path.join(directory, "stop") if directory else None

    def hold(self):
        if self.path:
            open(self.path, "w").close()

    def release(self):
        if self.path and os.path.exists(self.path):
            os.unlink(self.path)

    def stop(self):
        if self.end:
            open(self.end, "w").close()

    def stopped(self):
        return bool(self.end) and os.path.exists(self.end)

    def reset(self):
        """The driver, before each job: the last one's stop is not this
        one's."""
        for path in (self.path, self.end):
            if path and os.path.exists(path):
                os.unlink(path)

    def wait(self, limit_s=60.0):
        start = time.monotonic()
        while self.path and os.path.exists(self.path) and \
                time.monotonic() - start < limit_s:
            time.sleep(0.002)


def run_rank(args):
    import strata
    strata.init()  # aggregator ranks serve here and exit
    import torch
    import strata.torch as st

    torch.set_num_threads(1)
    ctx = st.context()
    me, workers = ctx.worker_index, ctx.num_workers
    policy = ctx.setting("policy")
    speeds = parse_speeds(args.speeds, workers)
    x, y, tx, ty = load_data(args, me, workers, torch)
    torch.manual_seed(args.seed)
    model = make_model(args.model, torch)
    ev = evaluator(speeds)
    idle = IdleEvaluation(model, tx, ty, torch) \
        if me == ev and speeds[ev] > min(speeds) else None
    if policy in ("esync", "fedavg") or ctx.setting("optimizer") == "sum":
        inner = torch.optim.SGD(model.parameters(), lr=args.lr,
                                momentum=args.momentum)
    else:  # the aggregators' SGD: the job's lr and momentum
        inner = torch.optim.SGD(model.parameters(), lr=float(ctx.setting("lr")),
                                momentum=float(ctx.setting("momentum")),
                                weight_decay=float(ctx.setting("weight_decay")))
    opt = st.DistributedOptimizer(inner, model.named_parameters(),
                                  named_buffers=model.named_buffers(),
                                  epoch_steps=args.epoch_steps)
    loss_fn = torch.nn.functional.cross_entropy
    pause = Pause(os.environ.get("STRATA_EXT_PY_EXAMPLE_DIR"))
    base = args.base_ms / 1e3
    log = open(args.log, "a") if args.log else None
    steps, trained, since_eval, reached = 0, 0.0, 0.0, None
    in_round, rounds = 0, []  # local steps of each completed round

    def report(acc, loss, at):
        nonlocal reached
        t, at_steps, clock = at
        if reached is None and acc >= args.target_acc:
            reached = t
        line = {"policy": policy, "t": t, "acc": acc, "loss": loss,
                "steps": at_steps, "clock": clock, "group": ctx.group}
        print(f"{policy:8s} {t:8.1f} s  acc {acc:.4f}  loss "
              f"{loss:.3f}  steps {at_steps}  clock {clock}", flush=True)
        if log:
            log.write(json.dumps(line) + "\n")
            log.flush()

    g = torch.Generator().manual_seed(args.seed + me)
    finished = False  # at a step with the global model in the parameters
    while not finished and not pause.stopped():
        order = torch.randperm(len(y), generator=g)
        for i in range(0, len(order) - args.batch + 1, args.batch):
            with opt.untimed():  # not this worker's step time
                pause.wait()
            if pause.stopped():
                break
            began = time.monotonic()
            idx = order[i:i + args.batch]
            opt.zero_grad()
            loss_fn(model(x[idx]), y[idx]).backward()
            opt.step()
            if base == 0:  # calibrate: 1.5 x the first compute times
                base = 1.5 * (time.monotonic() - began) if steps >= 2 else 0
            steps += 1
            in_round += 1
            if opt.synced:
                rounds.append(in_round)
                in_round = 0
            now = trained + time.monotonic() - began
            if idle and opt.synced and idle.at is None and \
                    since_eval + time.monotonic() - began >= args.eval_every:
                idle.take(model, (now, steps, ctx.clock))
                since_eval = -(time.monotonic() - began)
            done_eval = idle.advance(began + speeds[me] * base) \
                if idle else None
            pad = speeds[me] * base - (time.monotonic() - began)
            if pad > 0:
                time.sleep(pad)
            spent = time.monotonic() - began
            trained += spent
            since_eval += spent
            if done_eval:
                report(*done_eval)
            # The global model is in the parameters after every step, or at
            # a round's end (esync, fedavg): evaluate, and end, only then.
            if not opt.synced:
                continue
            done = trained >= args.budget or (reached and
                                              args.stop_at_target)
            if me != ev and done:
                finished = True
                break
            if me != ev or (not done and (idle or
                                          since_eval < args.eval_every)):
                continue
            if done:
                pause.stop()  # the others end at their next step
            if idle:  # the last evaluation: nobody trains any more
                pending = idle.advance(float("inf"))
                if pending:
                    report(*pending)
                if not pending or pending[2][1] != steps:
                    idle.take(model, (now, steps, ctx.clock))
                    report(*idle.advance(float("inf")))
                finished = True
                break
            since_eval = 0.0
            pause.hold()
            with opt.untimed():
                acc, loss = evaluate(model, tx, ty, torch)
            pause.release()
            report(acc, loss, (trained, steps, ctx.clock))
            if done or (reached and args.stop_at_target):
                finished = True
                break
    if me == ev:
        pause.stop()
    if log:  # one line per worker, appended whole
        log.write(json.dumps({
            "policy": policy, "end": True, "worker": me, "steps": steps,
            "rounds": len(rounds), "round_steps": summary(rounds),
            "trained_s": trained, "base_s": base, "speed": speeds[me],
            "evaluator": me == ev, "reached": reached}) + "\n")
        log.close()
    pause.release()
    st.finalize()


def summary(values):
    """mean, min and max, or None for none."""
    if not values:
        return None
    return [sum(values) / len(values), min(values), max(values)]


# ---- the driver ----

def launcher_path(args):
    if args.launcher:
        return args.launcher
    import strata._lib as lib
    guess = os.path.join(os.path.dirname(os.path.dirname(
        os.path.realpath(lib.path))), "bin", "strata-run")
    return guess if os.path.exists(guess) else shutil.which("strata-run")


def core_share(speeds, cores):
    """How many workers compute on each core at once: a worker of factor f
    computes for 1/f of the fastest's time (it sleeps the rest), so 117x
    workers (the ESync paper's CPUs against its GPUs) hardly count."""
    busy = sum(min(speeds) / f for f in speeds)
    return max(1.0, busy / cores)


def calibrate(args):
    """The x1 step time: a step of the model measured here, times the
    workers sharing each core, with a margin, so that padding, not the
    contention for cores, sets every worker's pace."""
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    torch.set_num_threads(1)
    model = make_model(args.model, torch)
    x = torch.randn(args.batch, 1, 28, 28)
    y = torch.randint(0, 10, (args.batch,))
    times = []
    for i in range(5):  # the first two compile oneDNN's kernels
        t = time.perf_counter()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        if i >= 2:
            times.append(time.perf_counter() - t)
    step = min(times)
    share = core_share(parse_speeds(args.speeds, args.workers),
                       os.cpu_count() or 1)
    base = 1.3 * step * share
    print(f"calibration: a {args.model} step takes {step * 1e3:.0f} ms here; "
          f"{args.workers} workers on {os.cpu_count()} cores: x1 step "
          f"{base * 1e3:.0f} ms", flush=True)
    return base * 1e3


def run_policy(args, policy, launcher, workdir):
    log = os.path.join(workdir, f"{policy}.jsonl")
    env = dict(os.environ, STRATA_POLICY=policy,
               STRATA_EXT_PY_EXAMPLE_DIR=workdir,
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    env.setdefault("STRATA_LR", str(args.lr))
    env.setdefault("STRATA_MOMENTUM", str(args.momentum))
    if policy == "ssp":
        env.setdefault("STRATA_STALENESS", "3")
    budget = args.bsp_budget if policy == "bsp" and args.bsp_budget \
        else args.budget
    argv = sys.argv[1:] + ["--base-ms", str(args.base_ms),
                           "--budget", str(budget)]
    cmd = [launcher, "-n", str(args.workers), "-a", str(args.aggregators),
           "--", sys.executable, os.path.abspath(__file__)] + argv + \
          ["--log", log]
    Pause(workdir).reset()
    started = time.monotonic()
    proc = subprocess.run(cmd, env=env)
    wall = time.monotonic() - started
    evals, ends = [], {}
    if os.path.exists(log):
        for line in open(log):
            rec = json.loads(line)
            if rec.get("end"):
                ends[rec["worker"]] = rec
            else:
                evals.append(rec)
    end = next((e for e in ends.values() if e.get("evaluator")),
               ends.get(0, {}))
    return {"policy": policy, "status": proc.returncode, "wall_s": wall,
            "evals": evals, "reached_s": end.get("reached"),
            "step_s": step_time(evals),
            "steps": ends.get(0, {}).get("steps"),
            "base_s": end.get("base_s"),
            "trained_s": end.get("trained_s"),
            "workers": [ends[w] for w in sorted(ends)],
            "final_acc": evals[-1]["acc"] if evals else None}


def step_time(evals):
    """Training seconds per step between the first and the last
    evaluation (the first steps' start-up left out), or None."""
    if len(evals) < 2 or evals[-1]["steps"] <= evals[0]["steps"]:
        return None
    return (evals[-1]["t"] - evals[0]["t"]) / \
        (evals[-1]["steps"] - evals[0]["steps"])


def model_bsp(args, results):
    """bsp stopped short of the target (--bsp-budget): its time to it is
    --bsp-steps (counted, load-independent) x its measured step time."""
    for r in results:
        if r["policy"] == "bsp" and not r["reached_s"] and \
                args.bsp_steps and r["step_s"]:
            r["modelled_s"] = args.bsp_steps * r["step_s"]


def print_table(args, results):
    ref = next((r for r in results if r["policy"] == "bsp"), results[0])
    ref_s = ref["reached_s"] or ref.get("modelled_s")
    print(f"\ntime to {args.target_acc:.0%} test accuracy ({args.model}, "
          f"{args.workers} workers, speeds {args.speeds or 'all x1'}):")
    print(f"{'policy':8s} {'to target':>10s} {'speed-up':>9s} "
          f"{'final acc':>9s} {'steps w0':>9s} {'job s':>7s}")
    for r in results:
        to = f"{r['reached_s']:.1f} s" if r["reached_s"] else \
            f"~{r['modelled_s']:.1f} s" if r.get("modelled_s") else \
            "not reached"
        up = f"{ref_s / r['reached_s']:.2f}x" \
            if r["reached_s"] and ref_s else "-"
        acc = f"{r['final_acc']:.4f}" if r["final_acc"] is not None else "-"
        print(f"{r['policy']:8s} {to:>10s} {up:>9s} {acc:>9s} "
              f"{r['steps'] or 0:>9d} {r['wall_s']:>7.0f}"
              + ("" if r["status"] == 0 else f"  (exit {r['status']})"))
        if r.get("modelled_s"):
            print(f"{'':8s} ~ modelled: {args.bsp_steps} steps to the "
                  f"target (counted by esync_rounds.py --bsp) x "
                  f"{r['step_s']:.3f} s a step (measured here over "
                  f"{r['evals'][-1]['steps'] - r['evals'][0]['steps']} "
                  f"steps, final acc {r['final_acc']:.4f})")
    rounds = [r for r in results if r["policy"] in ("esync", "fedavg")]
    if rounds:
        print("local steps per round, each worker (mean min-max of the "
              "steps of its pace in one of the slowest's) [speed]:")
    for r in rounds:
        slowest = max((w["speed"] for w in r["workers"]), default=1)
        print(f"{r['policy']:8s} " + "  ".join(
            f"w{w['worker']} {w['round_steps'][0]:.1f} "
            f"{w['round_steps'][1]}-{w['round_steps'][2]} of "
            f"{slowest / w['speed']:g} [x{w['speed']:g}]"
            if w["round_steps"] else f"w{w['worker']} -"
            for w in r["workers"]))


def plot(args, results, path):
    if not shutil.which("gnuplot"):
        print("no gnuplot (apt-get install gnuplot-nox): no plot",
              file=sys.stderr)
        return
    lines = ["set terminal pngcairo size 900,560 noenhanced",
             f"set output '{path}'",
             f"set title 'Fashion-MNIST {args.model}, speeds "
             f"{args.speeds or 'x1'}: test accuracy'",
             "set xlabel 'training time (s)'", "set ylabel 'test accuracy'",
             "set key bottom right", "set grid", "set yrange [0:1]"]
    series = [f"{args.target_acc} with lines dashtype 2 lc 'gray' "
              f"title 'target'"]
    data = []
    for r in results:
        series.append(f"'-' with linespoints title '{r['policy']}'")
        data.append("\n".join(f"{e['t']} {e['acc']}" for e in r["evals"])
                    + "\ne")
    script = "\n".join(lines) + "\nplot " + ", ".join(series) + "\n" + \
        "\n".join(data) + "\n"
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    print(f"plot: {path}")


def run_driver(args):
    policies = args.compare.split(",") if args.compare else \
        [args.policy or "bsp"]
    for p in policies:
        if p not in POLICIES:
            sys.exit(f"unknown policy '{p}' (one of {', '.join(POLICIES)})")
    parse_speeds(args.speeds, args.workers)
    launcher = launcher_path(args)
    if not launcher:
        sys.exit("strata-run not found: give --launcher PATH")
    if not args.base_ms:
        args.base_ms = calibrate(args)
    results = []
    with tempfile.TemporaryDirectory(prefix="strata-fmnist-",
                                     dir="/dev/shm" if os.path.isdir(
                                         "/dev/shm") else None) as workdir:
        prepare_data(args.data, workdir)
        for p in policies:
            results.append(run_policy(args, p, launcher, workdir))
    model_bsp(args, results)
    print_table(args, results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)
    if args.plot:
        plot(args, results, args.plot)
    return 0 if all(r["status"] == 0 for r in results) else 1


def main():
    args = parse_args()
    if any(v in os.environ for v in LAUNCHER_VARS):
        run_rank(args)
        # The job is done (finalized, log closed). Python's teardown with
        # torch loaded (every module's objects, libtorch's destructors)
        # costs a rank 0.6 s of CPU, 12 s of a job's wall time at load 20:
        # leave without it.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return run_driver(args)


if __name__ == "__main__":
    sys.exit(main())

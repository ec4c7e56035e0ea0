#!/usr/bin/python3
"""One BSP push-reduce-pull round of Strata against torch.distributed's
all_reduce over gloo: the same worker processes, the same bytes, in
alternating blocks.

    PYTHONPATH=build/python /usr/bin/python3 perf/pushpull/gloo_allreduce.py \\
        --workers 4 --aggregators 2 --min-bytes 4K --max-bytes 4M

The baseline strata-bench-pushpull keeps beside MPI_Allreduce, for
frameworks whose processes run PyTorch: W workers and S aggregators are
started by strata-run --spmd (every rank runs this script), and each worker
also joins a gloo process group of the W workers on loopback. For every size
(doubling from --min-bytes to --max-bytes, each a Strata job of its own, as
in strata-bench-pushpull: one fp32 tensor of ones, STRATA_OPTIMIZER=sum,
the partition size STRATA_PARTITION_BYTES or the engine's pick, printed)
the workers time blocks of Strata
rounds (strata_step) and blocks of gloo all_reduce calls on a tensor of the
same bytes, alternately, each block started by a gloo barrier; a block's
figure is its slowest worker's time per round, and the median block is
reported with the load average. Strata is called through the ctypes
binding, one call per round (about a microsecond more than C).
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time



def parse_bytes(text):
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1:] if t[-1:] in units and t[-1:] != "" else ""
    try:
        v = int(t[:-1] if unit else t) * units[unit]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a size") from None
    if v <= 0 or v % 4:
        raise argparse.ArgumentTypeError(
            f"'{text}': sizes are positive multiples of 4 bytes")
    return v


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--aggregators", type=int, default=2)
    ap.add_argument("--min-bytes", type=parse_bytes, default=4 << 10)
    ap.add_argument("--max-bytes", type=parse_bytes, default=4 << 20)
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--iters", type=int, default=0,
                    help="rounds per size (default: from the size)")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--rank", action="store_true",
                    help=argparse.SUPPRESS)  # internal: one rank of the job
    args = ap.parse_args()
    if args.min_bytes > args.max_bytes:
        ap.error("--min-bytes exceeds --max-bytes")
    if args.workers < 1 or args.aggregators < 1 or args.blocks < 1:
        ap.error("--workers, --aggregators and --blocks must be positive")
    return args


def sizes(args):
    b = args.min_bytes
    while b <= args.max_bytes:
        yield b
        b *= 2


def iterations(args, nbytes):
    """Rounds of a size: about 256 MiB moved, between 5 and 200."""
    return args.iters or min(max((256 << 20) // nbytes, 5), 200)


def job_settings(args, k):
    return {"STRATA_NUM_AGGREGATORS": args.aggregators,
            "STRATA_OPTIMIZER": "sum", "STRATA_LR": 1,
            "STRATA_COORD_FILE": f"{os.environ['STRATA_COORD_FILE']}.{k}"}


def slowest(dist, torch, us):
    t = torch.tensor([us], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def strata_block(ctx, dist, torch, n):
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(n):
        ctx.step()
    return slowest(dist, torch, (time.perf_counter() - t0) * 1e6 / n)


def gloo_block(dist, torch, buf, n):
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(n):
        dist.all_reduce(buf)
    return slowest(dist, torch, (time.perf_counter() - t0) * 1e6 / n)


def worker_size(args, ctx, dist, torch, nbytes):
    """The timed blocks of one size on a worker; returns the row."""
    import ctypes
    import strata._lib as strata
    count = nbytes // 4
    param = ctx.alloc(nbytes)
    grad = torch.ones(count, dtype=torch.float32)
    ctx.register("model", param, grad.data_ptr(), count,
                 strata.DTYPES["STRATA_FP32"])
    ctx.commit()
    buf = torch.zeros(count, dtype=torch.float32)  # stays 0: no overflow
    total = iterations(args, nbytes)
    blocks = min(args.blocks, total)
    per = total // blocks
    for _ in range(3):  # warm-up, as strata-bench-pushpull
        ctx.step()
        dist.all_reduce(buf)
    st, gl = [], []
    for _ in range(blocks):
        st.append(strata_block(ctx, dist, torch, per))
        gl.append(gloo_block(dist, torch, buf, per))
    out = (ctypes.c_float * count).from_address(param)
    for i in (0, count // 2, count - 1):
        if out[i] != float(args.workers):
            sys.exit(f"gloo_allreduce: element {i} of Strata's sum is "
                     f"{out[i]}, expected {args.workers}")
    row = {"bytes": nbytes, "workers": args.workers,
           "aggregators": args.aggregators,
           "transport": ctx.transport,
           "partition_bytes": ctx.partition_bytes,
           "strata_us": statistics.median(st), "strata_min_us": min(st),
           "gloo_us": statistics.median(gl), "gloo_min_us": min(gl),
           "load": os.getloadavg()[0]}
    ctx.free(param)
    return row


def run_rank(args):
    import strata
    first = int(os.environ["STRATA_RANK"]) == args.aggregators
    worker = int(os.environ["STRATA_RANK"]) >= args.aggregators
    if worker:
        import torch
        import torch.distributed as dist
        torch.set_num_threads(1)
        dist.init_process_group(
            "gloo", rank=int(os.environ["STRATA_RANK"]) - args.aggregators,
            world_size=args.workers)
    rows = []
    for k, nbytes in enumerate(sizes(args)):
        ctx = strata.Context(job_settings(args, k))
        if worker:
            rows.append(worker_size(args, ctx, dist, torch, nbytes))
            if first:
                print_row(rows[-1])
        else:
            ctx.serve()
        ctx.finalize()
    if worker:
        dist.destroy_process_group()
    if first and args.json:
        with open(args.json, "w") as f:
            json.dump({"results": rows}, f, indent=1)


def print_row(r):
    print(f"{r['bytes']:12d} {r['workers']:7d} {r['aggregators']:5d} "
          f"{r['transport']:>9s} {r['partition_bytes']:9d} "
          f"{r['strata_us']:11.1f} {r['gloo_us']:11.1f} "
          f"{r['strata_us'] / r['gloo_us']:7.2f} {r['load']:6.1f}",
          flush=True)


def strata_run():
    """strata-run of the build or installation the binding loads from."""
    import strata._lib as lib
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(lib.path)))
    return os.path.join(prefix, "bin", "strata-run")


def main():
    args = parse_args()
    if args.rank:
        return run_rank(args)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    env.setdefault("STRATA_TIMEOUT_MS", "60000")  # python ranks start slowly
    me = [sys.executable, os.path.abspath(__file__), "--rank",
          "--workers", str(args.workers), "--aggregators",
          str(args.aggregators), "--min-bytes", str(args.min_bytes),
          "--max-bytes", str(args.max_bytes), "--blocks", str(args.blocks),
          "--iters", str(args.iters)]
    if args.json:
        me += ["--json", os.path.abspath(args.json)]
    print("# gloo_allreduce: one BSP push-reduce-pull round (sum) vs "
          "torch.distributed all_reduce over gloo, same processes\n"
          f"# time per round: median of {args.blocks} blocks, slowest "
          "worker; load: 1-minute average at the end of the size\n"
          f"#{'bytes':>11s} {'workers':>7s} {'aggs':>5s} {'transport':>9s} "
          f"{'partition':>9s} {'strata_us':>11s} {'gloo_us':>11s} "
          f"{'ratio':>7s} {'load':>6s}", flush=True)
    cmd = [strata_run(), "--spmd", "-n", str(args.workers), "-a",
           str(args.aggregators), "--"] + me
    return subprocess.run(cmd, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())

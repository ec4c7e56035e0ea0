"""The table of perf/multihost/bench-netns.sh, from the JSON files of its
runs: medians over rounds, the link bound, and the ratios within the run."""
import glob
import json
import os
import re
import statistics
import sys


def rate_bps(rate):
    # 1gbit, or 1gbit-coloc-stage0 (--colocate 1, --stage-model 1,0)
    m = re.fullmatch(r"(\d+)([kmg]?)bit", shaped(rate))
    if not m:
        return None
    return int(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]


def shaped(rate):
    # the rate a run's links had: 1gbit-coloc-stage0 ran at 1gbit
    return re.sub(r"(-coloc)?(-stage\d)?$", "", rate)


def busiest_bytes(rate, workers, s, nbytes):
    """What the busiest link carries in one direction per round."""
    if "-coloc" in rate:
        # a host with an aggregator sends its worker's pushes to the S - 1
        # others and its aggregator's models to the W - 1 other workers
        return max(s + workers - 2, s) / s * nbytes
    return max(workers / s, 1) * nbytes


def main(out, workers):
    runs = {}  # (rate, S, bytes) -> {"strata": [...], "mpi": [...]}
    for path in glob.glob(os.path.join(out, "*-S*-r*.json")):
        m = re.fullmatch(r"(.+)-S(\d+)-r\d+\.json", os.path.basename(path))
        rate, s = m.group(1), int(m.group(2))
        with open(path) as f:
            for row in json.load(f)["results"]:
                r = runs.setdefault((rate, s, row["bytes"]),
                                    {"strata": [], "mpi": []})
                r["strata"].append(row["strata_us"])
                if row["mpi_allreduce_us"] is not None:
                    r["mpi"].append(row["mpi_allreduce_us"])
    path_bps = {}  # rate -> what one iperf3 stream carried
    for path in sorted(glob.glob(os.path.join(out, "iperf-*.json"))):
        rate = re.fullmatch(r"iperf-(.+)-\d+\.json",
                            os.path.basename(path)).group(1)
        try:
            with open(path) as f:
                bps = json.load(f)["end"]["sum_received"]["bits_per_second"]
            path_bps[rate] = bps
            print(f"# iperf3 one stream at {rate}: {bps / 1e9:.3f} Gbit/s")
        except (ValueError, KeyError):
            print(f"# iperf3 at {rate}: no result")
    print(f"#{'rate':>12} {'S':>3} {'bytes':>10} {'strata_us':>11} "
          f"{'bound_us':>10} {'eff':>6} {'mpi_us':>11} {'vs_mpi':>7} "
          f"{'vs_S1':>6} {'path_us':>10} {'path_eff':>8} {'n':>3}")
    for (rate, s, nbytes) in sorted(runs, key=lambda k: (k[0], k[2], k[1])):
        r = runs[(rate, s, nbytes)]
        st = statistics.median(r["strata"])
        mpi = statistics.median(r["mpi"]) if r["mpi"] else None
        bps = rate_bps(rate)
        busiest = busiest_bytes(rate, workers, s, nbytes) * 8  # bits
        bound = busiest / bps * 1e6 if bps else None
        pbps = path_bps.get(shaped(rate))
        path = busiest / pbps * 1e6 if pbps else None
        one = runs.get((rate, 1, nbytes))
        vs1 = statistics.median(one["strata"]) / st if one else None
        # a missing figure is "-", as wide as the figure would be
        fmt = lambda v, f: format(v, f) if v is not None else format(
            "-", f.split(".")[0])
        print(f" {rate:>12} {s:>3} {nbytes:>10} {st:>11.0f} "
              f"{fmt(bound, '>10.0f')} {fmt(bound and bound / st, '>6.2f')} "
              f"{fmt(mpi, '>11.0f')} {fmt(mpi and mpi / st, '>7.2f')} "
              f"{fmt(vs1, '>6.2f')} {fmt(path, '>10.0f')} "
              f"{fmt(path and path / st, '>8.2f')} {len(r['strata']):>3}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))

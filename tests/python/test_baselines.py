"""perf/pushpull/gloo_allreduce.py: Strata's round and gloo's all_reduce in
the same worker processes, on the same bytes; a tiny run checks Strata's sums
(the script exits non-zero otherwise), the rows and the JSON. (It measures
nothing here.)"""

import json
import subprocess

from conftest import PYTHON, SOURCE, job_env

SCRIPT = SOURCE / "perf" / "pushpull" / "gloo_allreduce.py"


def test_gloo_beside_strata(build, tmp_path):
    out = tmp_path / "gloo.json"
    proc = subprocess.run(
        [PYTHON, str(SCRIPT), "--workers", "2", "--aggregators", "2",
         "--min-bytes", "4K", "--max-bytes", "8K", "--blocks", "2",
         "--iters", "4", "--json", str(out)],
        env=job_env(build), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads(out.read_text())["results"]
    assert [r["bytes"] for r in rows] == [4096, 8192]
    for r in rows:
        assert r["workers"] == 2 and r["aggregators"] == 2, r
        # the engine's pick: its floor, the whole model on one aggregator
        assert r["partition_bytes"] == 1048576, r
        assert r["transport"] == "shm", r
        assert 0 < r["strata_min_us"] <= r["strata_us"], r
        assert 0 < r["gloo_min_us"] <= r["gloo_us"], r
    lines = [ln for ln in proc.stdout.splitlines() if not ln.startswith("#")]
    assert len(lines) == 2 and lines[0].split()[0] == "4096", proc.stdout


def test_bad_size_refused(build):
    proc = subprocess.run([PYTHON, str(SCRIPT), "--min-bytes", "6"],
                          env=job_env(build), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert "multiples of 4 bytes" in proc.stderr

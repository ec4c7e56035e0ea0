"""Scripts every rank runs, the aggregator serving in strata.init():
examples/torch/fashion_mnist.py under torchrun (with the Python 3.11
workaround: --redirects 1 --tee 1 --log_dir) and fedavg, briefly (rounds of
two steps, so that the slowest worker evaluates after the first whatever
the load; each worker records its local steps per round); and
jobs/launch.py under mpirun, where every worker must end with the same
parameters. (strata-run runs the jobs of test_training.py, with --spmd, and
test_failures.py, without.)"""

import json
import shutil
import socket
import subprocess

import pytest

from conftest import HERE, PYTHON, job_env, show

SCRIPT = HERE / "jobs" / "launch.py"
EXAMPLE = HERE.parent.parent / "examples" / "torch" / "fashion_mnist.py"


def _same_params(out, proc):
    res = [json.loads((out / f"worker{w}.json").read_text())
           if (out / f"worker{w}.json").exists() else None for w in (0, 1)]
    assert None not in res, show(proc)
    assert res[0]["workers"] == 2
    assert res[0]["params"] == res[1]["params"]


def _free_port_pair():
    """A port P with P+1 free too (torchrun's store, then Strata's
    coordinator on MASTER_PORT+1)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
                return port
            except OSError:
                continue
    pytest.fail("no pair of free ports")


def test_torchrun_runs_the_example(build, tmp_path):
    torchrun = shutil.which("torchrun") or "/usr/bin/torchrun"
    port = _free_port_pair()
    env = job_env(build, {"STRATA_NUM_AGGREGATORS": "1",
                          "STRATA_POLICY": "fedavg",
                          "STRATA_FEDAVG_STEPS": "2",
                          "STRATA_JOB_SECRET": "torchrun-test-secret"})
    log = tmp_path / "evals.jsonl"
    cmd = [PYTHON, torchrun, "--redirects", "1", "--tee", "1", "--log_dir",
           str(tmp_path / "logs"), "--nproc_per_node", "3", "--master_addr",
           "127.0.0.1", "--master_port", str(port), str(EXAMPLE),
           "--speeds", "1,2", "--base-ms", "150", "--budget", "6",
           "--train-size", "640", "--test-size", "200", "--eval-every", "0.5",
           "--log", str(log)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, show(proc)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    evals = [e for e in lines if "acc" in e]
    assert evals and all(e["policy"] == "fedavg" for e in evals), lines
    # every worker's record: its local steps, counted round by round
    ends = {e["worker"]: e for e in lines if e.get("end")}
    assert set(ends) == {0, 1} and ends[0]["steps"] > 0, lines
    assert ends[0]["rounds"] >= 1, lines
    for e in ends.values():
        assert e["rounds"] == 0 or e["round_steps"] == [2.0, 2, 2], lines
    assert "fedavg" in proc.stdout  # the progress lines


@pytest.mark.skipif(not shutil.which("mpirun"), reason="no mpirun")
def test_mpirun(build, tmp_path):
    env = job_env(build, {"STRATA_NUM_AGGREGATORS": "1",
                          "STRATA_JOB_SECRET": "mpirun-test-secret",
                          "STRATA_COORD": f"127.0.0.1:{_free_port_pair()}"})
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-n", "3"]
    for var in ("PYTHONPATH", "STRATA_NUM_AGGREGATORS", "STRATA_JOB_SECRET",
                "STRATA_COORD", "OMP_NUM_THREADS"):
        cmd += ["-x", var]
    cmd += [PYTHON, str(SCRIPT), str(tmp_path)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, show(proc)
    _same_params(tmp_path, proc)

"""Shared by the Python tests: the build tree, and running a Strata job."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SOURCE = HERE.parent.parent
PYTHON = "/usr/bin/python3"  # Debian's, which sees python3-torch


def pytest_addoption(parser):
    parser.addoption("--strata-build", required=True,
                     help="the CMake build directory")


@pytest.fixture(scope="session")
def build(request):
    return Path(request.config.getoption("--strata-build")).resolve()


def job_env(build, extra=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(build / "python")] + ([env["PYTHONPATH"]]
                                   if env.get("PYTHONPATH") else []))
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["OMP_NUM_THREADS"] = env["OPENBLAS_NUM_THREADS"] = "1"
    # Python ranks start slowly (import torch) on a loaded 2-core machine:
    # a generous join and wait bound, which a real hang still reaches.
    env.setdefault("STRATA_TIMEOUT_MS", "60000")
    env.update(extra or {})
    return env


def run_job(build, script_args, workers=2, aggregators=1, spmd=False,
            env=None, timeout=240):
    """strata-run -n WORKERS -a AGGREGATORS [--spmd] -- python3 ARGS."""
    cmd = [str(build / "bin" / "strata-run"), "-n", str(workers), "-a",
           str(aggregators)] + (["--spmd"] if spmd else []) + \
          ["--", PYTHON] + [str(a) for a in script_args]
    return subprocess.run(cmd, env=job_env(build, env), capture_output=True,
                          text=True, timeout=timeout)


def show(proc):
    """The output of a job, for an assertion message."""
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}" \
           f"\n--- stderr\n{proc.stderr[-6000:]}"


def run_scenarios(build, out, only=None, aggregators=1, timeout=280):
    """tests/python/jobs/scenarios.py as one job of 2 workers: each worker's
    results by scenario, after checking that none failed."""
    import json
    proc = run_job(build, [HERE / "jobs" / "scenarios.py", "--out", out] +
                   (["--only"] + list(only) if only else []),
                   aggregators=aggregators, spmd=True, timeout=timeout)
    res = {}
    for w in (0, 1):
        path = out / f"worker{w}.json"
        assert path.exists(), show(proc)
        res[w] = json.loads(path.read_text())
    errors = [f"worker {w} {name}: {r['error']}" for w in res
              for name, r in res[w].items() if "error" in r]
    assert proc.returncode == 0 and not errors, "\n".join(errors) + show(proc)
    return res


def both(results, scenario):
    """Worker 0's and worker 1's results of a scenario."""
    assert scenario in results[0] and scenario in results[1], \
        f"scenario {scenario} did not run"
    return results[0][scenario], results[1][scenario]


def facts(result):
    """A scenario's result without its long lists, for a message."""
    return {k: v for k, v in result.items() if not isinstance(v, list)}

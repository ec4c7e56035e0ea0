"""libstrata loads into a fresh Python process with nothing set before it
starts (no LD_PRELOAD, tunable or re-exec), alone, before torch and after
torch, and both work afterwards. Before the allocator change, the first
failed with "cannot allocate memory in static TLS block" and the second
aborted inside import torch with "free(): invalid pointer"."""

import subprocess

import pytest

from conftest import PYTHON, job_env

# The library answers; a failing call raises with the library's own words
# (strata_last_error), and its log reaches a Python logger when asked.
USE_STRATA = """
import logging, strata
assert strata.version().count(".") == 2
seen = []
class Keep(logging.Handler):
    def emit(self, record):
        seen.append((record.levelno, record.getMessage()))
log = logging.getLogger("strata-test")
log.addHandler(Keep())
log.propagate = False
strata.capture_log(log)
try:
    strata.Context({"STRATA_NO_SUCH_SETTING": "1"})
    raise SystemExit("an unknown setting was accepted")
except strata.StrataError as e:
    assert e.name == "STRATA_ERR_CONFIG", e
    assert "STRATA_NO_SUCH_SETTING=1" in str(e) and "unknown setting" in str(e), e
strata.capture_log(False)
assert any(lvl == logging.ERROR and "STRATA_NO_SUCH_SETTING" in m
           for lvl, m in seen), seen
"""

USE_TORCH = """
import torch
m = torch.nn.Conv2d(1, 4, 3)
m(torch.randn(2, 1, 8, 8)).sum().backward()
assert m.weight.grad is not None
"""

ORDERS = {
    "strata alone": USE_STRATA,
    "strata, then torch": USE_STRATA + USE_TORCH + USE_STRATA,
    "torch, then strata": USE_TORCH + USE_STRATA + USE_TORCH,
}


@pytest.mark.parametrize("order", ORDERS)
def test_fresh_process_loads_and_uses_libstrata(build, order):
    env = job_env(build)
    for var in ("LD_PRELOAD", "GLIBC_TUNABLES"):
        env.pop(var, None)
    proc = subprocess.run([PYTHON, "-c", ORDERS[order]], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{order}: exit {proc.returncode}\n" \
                                 f"{proc.stderr[-3000:]}"

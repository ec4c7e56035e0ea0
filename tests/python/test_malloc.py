"""The memory a torch training step frees stays in the heap for the next
step once strata.torch set glibc's thresholds: its steps fault no page in.
Without it (glibc's defaults) each step of this model faulted about 4,700
pages in again, 100 ms of CPU per step on this machine (docs/python.md)."""

import subprocess

from conftest import PYTHON, SOURCE, job_env

# Steps of the example's AlexNet-like CNN in one process; printed: the
# median of the minor page faults of the steps after the first three (an
# occasional step faults a few hundred pages in once, as the heap grows).
STEPS = """
import resource, sys
import torch
sys.path.insert(0, {examples!r})
import strata.torch as st
from fashion_mnist import make_model
if {tuned}:
    assert st._retain_freed_memory()
torch.set_num_threads(1)
torch.manual_seed(1)
model = make_model("alexnet", torch)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
x, y = torch.randn(32, 1, 28, 28), torch.randint(0, 10, (32,))
per_step = []
for i in range(10):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    per_step.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(sorted(per_step[3:])[3])
"""


def faults_per_step(build, tuned):
    script = STEPS.format(examples=str(SOURCE / "examples" / "torch"),
                          tuned=tuned)
    out = subprocess.run([PYTHON, "-c", script], env=job_env(build),
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    return float(out.stdout.split()[-1])


def test_steps_fault_no_page_in(build):
    # (faults_per_step(build, False) is the same job without it: 4,933.)
    faults = faults_per_step(build, True)
    assert faults < 50, f"{faults:.0f} page faults per step"


def test_the_environment_wins(build):
    script = ("import strata.torch as st\n"
              "assert not st._retain_freed_memory()\n")
    env = job_env(build, {"MALLOC_TRIM_THRESHOLD_": "1048576"})
    out = subprocess.run([PYTHON, "-c", script], env=env,
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr

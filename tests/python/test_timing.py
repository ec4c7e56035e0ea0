"""What strata.torch.DistributedOptimizer tells the State Server a local
step took, on a stand-in context and clock (no job): the time between
step() calls, less what the program spent inside opt.untimed() (evaluation,
waiting for another worker), which would otherwise make the evaluating
worker the round's slowest."""

import ctypes

import torch

import strata.torch as st


class Clock:
    def __init__(self):
        self.now = 100.0

    def perf_counter(self):
        return self.now


class RoundsContext:
    """The calls the optimizer makes on a worker's context under esync."""

    is_worker, finalized, worker_index, num_workers = True, False, 0, 2

    def __init__(self):
        self.buffers, self.reported, self.syncs = [], [], 0

    def setting(self, key):
        return {"policy": "esync", "optimizer": "sgd"}[key]

    def alloc(self, nbytes):
        buf = ctypes.create_string_buffer(nbytes)
        self.buffers.append(buf)
        return ctypes.addressof(buf)

    def register(self, name, param, grad, count, dtype):
        return len(self.buffers)

    def commit(self):
        pass

    def on_finalize(self, fn):
        pass

    def round_ready(self, step_seconds):
        self.reported.append(step_seconds)
        return False

    def round_sync(self):
        self.syncs += 1


def test_untimed_time_is_not_the_step_time(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(st, "time", clock)
    model = torch.nn.Linear(4, 2)
    ctx = RoundsContext()
    opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                  model.named_parameters(), context=ctx,
                                  retain_freed_memory=False)

    def step(seconds):
        opt.zero_grad()
        model(torch.ones(3, 4)).sum().backward()
        clock.now += seconds
        opt.step()

    step(0.25)
    with opt.untimed():  # e.g. evaluation on the test set
        clock.now += 30.0
    step(0.5)
    clock.now += 0.125  # data loading: part of the step
    step(0.25)
    assert ctx.reported == [0.25, 0.5, 0.375]
    assert ctx.syncs == 0

"""What strata.torch.DistributedOptimizer tells the State Server a local
step took, on a stand-in context and clock (no job): the time between
step() calls, less what the program spent inside opt.untimed() (evaluation,
waiting for another worker), which would otherwise make the evaluating
worker the round's slowest. And what it tells gssp's coordinator at each
epoch end: its compute per step, without the waits inside step()."""

import ctypes

import torch

import strata.torch as st


class Clock:
    def __init__(self):
        self.now = 100.0

    def perf_counter(self):
        return self.now


class StandIn:
    """The calls the optimizer makes on any worker's context."""

    is_worker, finalized, worker_index, num_workers = True, False, 0, 2
    policy = None

    def __init__(self):
        self.buffers = []

    def setting(self, key):
        return {"policy": self.policy, "optimizer": "sgd", "lr": "0.1",
                "momentum": "0", "weight_decay": "0"}[key]

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


class RoundsContext(StandIn):
    """... and under esync."""

    policy = "esync"

    def __init__(self):
        super().__init__()
        self.reported, self.syncs = [], 0

    def round_ready(self, step_seconds):
        self.reported.append(step_seconds)
        return False

    def round_sync(self):
        self.syncs += 1


def wrapped(clock, ctx, **kwargs):
    """A wrapped SGD on ctx, and step(seconds): a training step whose
    compute takes that long on clock."""
    model = torch.nn.Linear(4, 2)
    opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                  model.named_parameters(), context=ctx,
                                  retain_freed_memory=False, **kwargs)

    def step(seconds):
        opt.zero_grad()
        model(torch.ones(3, 4)).sum().backward()
        clock.now += seconds
        opt.step()
    return opt, step


def test_untimed_time_is_not_the_step_time(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(st, "time", clock)
    ctx = RoundsContext()
    opt, step = wrapped(clock, ctx)
    step(0.25)
    with opt.untimed():  # e.g. evaluation on the test set
        clock.now += 30.0
    step(0.5)
    clock.now += 0.125  # data loading: part of the step
    step(0.25)
    assert ctx.reported == [0.25, 0.5, 0.375]
    assert ctx.syncs == 0


class Request:
    def __init__(self, on_wait=None):
        self.on_wait = on_wait

    def wait(self):
        if self.on_wait:
            self.on_wait()

    def test(self):
        return True


class GsspContext(StandIn):
    """... and under gssp, where each pull waits WAIT seconds (for the
    slowest member of the group)."""

    policy = "gssp"
    WAIT = 10.0

    def __init__(self, clock):
        super().__init__()
        self.clock, self.epochs, self.pushes, self.pulls = clock, [], 0, 0

    def push(self, ids=None):
        self.pushes += 1
        return Request()

    def pull(self):
        self.pulls += 1

        def waited():
            self.clock.now += self.WAIT
        return Request(waited)

    def epoch_end(self, seconds):
        self.epochs.append(seconds)


def test_gssp_epochs_report_compute_without_the_waits(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(st, "time", clock)
    ctx = GsspContext(clock)
    opt, step = wrapped(clock, ctx, epoch_steps=2)
    step(0.25)
    step(0.5)  # an epoch ends: the mean compute per step
    with opt.untimed():
        clock.now += 30.0
    step(1.0)
    assert ctx.epochs == [0.375]
    step(2.0)
    assert ctx.epochs == [0.375, 1.5]
    # two tensors pushed from backward's hooks, one pull a step
    assert ctx.pushes == 8 and ctx.pulls == 4

"""strata.torch: PyTorch training through Strata.

    import strata.torch as st
    st.init()                                   # aggregator ranks serve and exit
    opt = st.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                  named_parameters=model.named_parameters())
    for x, y in data:
        opt.zero_grad()
        loss_fn(model(x), y).backward()         # gradients pushed as they appear
        opt.step()                              # the model of the next clock
    st.finalize()

What step() does depends on STRATA_POLICY and STRATA_OPTIMIZER (docs/python.md):
- bsp, ssp, asp, gssp with the aggregators' SGD: pushes each gradient from a
  hook while backward runs, then pulls; the aggregators update the model, which
  they write straight into the parameters (they live in Strata's memory). The
  wrapped optimizer must be torch.optim.SGD with the job's lr, momentum and
  weight decay; it is not stepped.
- bsp with STRATA_OPTIMIZER=sum: the same pushes; the pull brings the sum of
  every worker's gradients, step() puts their mean into p.grad, and the
  wrapped optimizer steps locally: any optimizer, param groups and LR
  scheduler. To edit the mean before the step (clipping), as with Horovod:
      opt.synchronize()                       # p.grad: every worker's mean
      torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
      with opt.skip_synchronize():
          opt.step()
Gradients live in one block of Strata's memory, packed in registration
order, so that over shm the aggregators read them in place (zero copy).
- esync and fedavg: the wrapped optimizer steps locally; step() times the
  step and, when the round ends, averages the models.
"""

import contextlib
import ctypes
import os
import time

import torch

from strata import _core
from strata._core import (Context, PeerError, StrataError, TimeoutError,
                          context, finalize, init, num_aggregators,
                          num_workers, rank, size, worker_index)

__all__ = [
    "Context", "DistributedOptimizer", "PeerError", "StrataError",
    "TimeoutError", "context", "finalize", "init", "num_aggregators",
    "num_workers", "rank", "size", "worker_index",
]

_DTYPES = {torch.float32: 0, torch.float64: 1, torch.float16: 2,
           torch.bfloat16: 3}
_ROUNDS = ("esync", "fedavg")
_GRADIENT_POLICIES = ("bsp", "ssp", "asp", "gssp")
_REAP_EVERY = 64  # completed push requests are collected past this many


# glibc's mallopt parameters (malloc.h) and the values _retain_freed_memory
# sets: what a training step frees stays in the heap up to these sizes.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD = 32 << 20  # glibc's own ceiling for its dynamic threshold
_TRIM_THRESHOLD = 128 << 20
_MALLOC_ENV = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_",
               "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")


def _retain_freed_memory():
    """Keep the memory a training step frees in the heap for the next step.

    With glibc's defaults a CPU training step of torch gives its freed
    activations and gradients back to the kernel (heap trimming and mmap
    above a threshold that only rises after a large block was freed) and
    faults them in again on the next step: about 4,700 page faults and 100
    ms of CPU per step of the AlexNet-like CNN here (docs/python.md). DDP
    escapes it by chance (freeing its 25 MB buckets raises the threshold);
    Strata's gradients live in Strata's memory, so nothing raises it. Returns
    whether the thresholds were set: not when the process set its own in
    the environment, or its C library is not glibc."""
    if any(v in os.environ for v in _MALLOC_ENV) or \
            "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD) and
                mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))


def _state_error(message):
    return StrataError(_core._lib.STATUS["STRATA_ERR_STATE"], message)


def _config_error(message):
    return StrataError(_core._lib.STATUS["STRATA_ERR_CONFIG"], message)


class _Slot:
    """One registered tensor: the torch tensor it serves and its buffers."""

    __slots__ = ("name", "tensor", "param", "grad", "id", "is_buffer",
                 "passes", "pushed", "version")

    def __init__(self, name, tensor, is_buffer=False):
        self.name = name
        self.tensor = tensor
        self.is_buffer = is_buffer
        self.param = self.grad = None
        self.id = -1
        self.passes = 0
        self.pushed = False
        # p.grad's version counter when its push was posted (torch bumps it
        # at every in-place write); None once a write was reported.
        self.version = None


def _strata_tensor(ctx, like):
    """A tensor in Strata's memory with like's shape and dtype, and its
    address."""
    nbytes = like.numel() * like.element_size()
    address = ctx.alloc(nbytes)
    raw = (ctypes.c_byte * nbytes).from_address(address)
    t = torch.frombuffer(raw, dtype=like.dtype, count=like.numel())
    return t.view(like.shape), address


class _Block:
    """One strata_alloc block holding a tensor shaped like each of tensors,
    packed back to back in their order (the registration order, which the
    layout's partitions follow): a partition's gradients then lie contiguous
    in one block, so over shm the aggregators read them in place (zero
    copy, docs/engine.md). Runs of one dtype are packed without a gap; a new
    dtype starts at a 64-byte boundary (a partition never spans dtypes)."""

    __slots__ = ("address", "nbytes", "views", "runs")

    def __init__(self, ctx, tensors):
        offsets, off, dtype = [], 0, None
        for t in tensors:
            if t.dtype != dtype:
                off, dtype = -(-off // 64) * 64, t.dtype
            offsets.append(off)
            off += t.numel() * t.element_size()
        self.nbytes = max(off, 1)
        self.address = ctx.alloc(self.nbytes)
        raw = (ctypes.c_byte * self.nbytes).from_address(self.address)
        self.views = [torch.frombuffer(raw, dtype=t.dtype, count=t.numel(),
                                       offset=o).view(t.shape)
                      for t, o in zip(tensors, offsets)]
        # Each run of one dtype as one flat tensor, for whole-block ops.
        self.runs = []
        for t, view in zip(tensors, self.views):
            if self.runs and self.runs[-1][0].dtype == t.dtype:
                self.runs[-1][1] += t.numel()
            else:
                self.runs.append([view, t.numel()])
        self.runs = [torch.frombuffer(raw, dtype=first.dtype, count=count,
                                      offset=first.data_ptr() - self.address)
                     for first, count in self.runs]

    def holds(self, tensor):
        """Whether tensor's data lies in this block."""
        return self.address <= tensor.data_ptr() < self.address + self.nbytes


class _DistributedOptimizer:
    # Methods copied into a subclass of the wrapped optimizer's class, so the
    # result keeps its type, hyper-parameters and state_dict (as Horovod and
    # BytePS do).

    def __init__(self, params, named_parameters, named_buffers, ctx,
                 backward_passes_per_step, epoch_steps, push_in_backward):
        super(self.__class__, self).__init__(params)
        self._ctx = ctx
        self._passes = backward_passes_per_step
        self._epoch_steps = epoch_steps
        self._steps = 0
        # Whether the last step() left the global model in the parameters:
        # always with gradient policies, at a round's end with rounds.
        self.synced = True
        self._compute = 0.0  # seconds outside step() in this epoch (gssp)
        # synchronize() ended this step's clock; skip_synchronize() is open.
        self._synchronized = self._skip_sync = False
        self._pending = []
        self._grad_accs = []
        self._policy = ctx.setting("policy")
        self._sum = ctx.setting("optimizer") == "sum"
        self._rounds = self._policy in _ROUNDS
        self._check_mode()
        self._slots = self._make_slots(named_parameters, named_buffers)
        self._register()
        ctx.on_finalize(self._detach)
        if not self._rounds and push_in_backward:
            self._install_hooks()
        self._step_started = time.perf_counter()

    # ---- set-up ----
    def _check_mode(self):
        ctx = self._ctx
        if self._sum and self._policy != "bsp":
            raise _config_error(
                f"STRATA_OPTIMIZER=sum works with STRATA_POLICY=bsp only "
                f"(the job has {self._policy})")
        if self._rounds or self._sum:
            return
        if not isinstance(self, torch.optim.SGD):
            raise _config_error(
                f"STRATA_POLICY={self._policy} with the aggregators' SGD: wrap "
                f"torch.optim.SGD (got {type(self).__name__}); for another "
                f"optimizer use STRATA_POLICY=bsp with STRATA_OPTIMIZER=sum, "
                f"or esync/fedavg")
        job = {k: float(ctx.setting(k))
               for k in ("lr", "momentum", "weight_decay")}
        for i, group in enumerate(self.param_groups):
            for key, want in job.items():
                have = float(group[key])
                if abs(have - want) > 1e-9 * max(1.0, abs(want)):
                    raise _config_error(
                        f"param group {i}: {key}={have:g} but the job's "
                        f"aggregators apply STRATA_{key.upper()}={want:g} "
                        f"(set one to the other)")
            if group.get("nesterov") or group.get("dampening", 0) != 0 or \
                    group.get("maximize"):
                raise _config_error(
                    f"param group {i}: nesterov, dampening and maximize are "
                    f"not what the aggregators' SGD does")
        self._lr = job["lr"]

    def _make_slots(self, named_parameters, named_buffers):
        in_groups = {id(p) for g in self.param_groups for p in g["params"]}
        slots, seen = [], set()
        if named_parameters is None:
            named_parameters = [(f"param.{i}", p) for i, p in
                                enumerate(p for g in self.param_groups
                                          for p in g["params"])]
        for name, p in named_parameters:
            if id(p) in seen:
                continue
            seen.add(id(p))
            if id(p) not in in_groups or not p.requires_grad or \
                    p.numel() == 0:
                continue
            if p.dtype not in _DTYPES:
                raise _config_error(f"parameter '{name}' is {p.dtype}: Strata "
                                    f"carries float32/64, float16, bfloat16")
            slots.append(_Slot(name, p))
        missing = in_groups - seen
        if missing:
            raise _config_error(
                f"{len(missing)} parameter(s) of the optimizer are not in "
                f"named_parameters (pass model.named_parameters())")
        # Float buffers (BatchNorm's running statistics) travel where the
        # mode averages them: at every round, or at every pull in sum mode.
        if named_buffers is not None and (self._rounds or self._sum):
            for name, b in named_buffers:
                if b.dtype in (torch.float32, torch.float64) and b.numel():
                    slots.append(_Slot("buffer:" + name, b, is_buffer=True))
        return slots

    def _register(self):
        """Gradients into one block, the model (sum mode: the sum) into
        another, laid out alike; then register and commit. Apart, so the
        aggregators can read the gradients in place while the model lands
        in the other block."""
        ctx = self._ctx
        tensors = [s.tensor for s in self._slots]
        self._grads = self._params = None
        moved = []
        try:
            self._grads = _Block(ctx, tensors)
            self._params = _Block(ctx, tensors)
            for s, g, p in zip(self._slots, self._grads.views,
                               self._params.views):
                t = s.tensor
                s.grad, s.param = g, p
                g.zero_()
                moved.append((t, t.data, t.grad))
                if not self._sum:  # the model arrives in the parameters
                    p.copy_(t.data)
                    t.data = p
                if not s.is_buffer and not self._rounds:
                    t.grad = g
                s.id = ctx.register(s.name, p.data_ptr(), g.data_ptr(),
                                    t.numel(), _DTYPES[t.dtype])
        except BaseException:
            # The tensors get their own memory back (finalize would free
            # the blocks under them), and the blocks go unless a tensor
            # registered in them holds them (the library cannot take it
            # back: finalize the context).
            for t, data, grad in moved:
                t.data, t.grad = data, grad
            if not any(s.id >= 0 for s in self._slots):
                for block in (self._grads, self._params):
                    if block is not None:
                        ctx.free(block.address)
            for s in self._slots:
                s.grad = s.param = None
            self._grads = self._params = None
            raise
        ctx.commit()  # every worker now holds the first worker's model
        if self._sum:
            self._broadcast()

    def _broadcast(self):
        """Sum mode: the aggregators only add, so the first worker's model
        reaches the others as a sum of it and zeros (one clock)."""
        first = self._ctx.worker_index == 0
        with torch.no_grad():
            for s in self._slots:
                s.grad.copy_(s.tensor) if first else s.grad.zero_()
        self._ctx.push().wait()
        self._ctx.pull().wait()
        with torch.no_grad():
            for s in self._slots:
                s.tensor.copy_(s.param)
            for g in self._grads.runs:
                g.zero_()

    def _install_hooks(self):
        for s in self._slots:
            if s.is_buffer:
                continue
            hook = self._make_hook(s)
            if hasattr(s.tensor, "register_post_accumulate_grad_hook"):
                s.tensor.register_post_accumulate_grad_hook(
                    lambda p, hook=hook: hook())
                continue
            # torch < 2.1: a hook on the AccumulateGrad node, kept alive here.
            acc = s.tensor.expand_as(s.tensor).grad_fn.next_functions[0][0]
            acc.register_hook(lambda *unused, hook=hook: hook())
            self._grad_accs.append(acc)

    def _make_hook(self, slot):
        def hook():
            if self._ctx.finalized:
                return
            # After a synchronize() whose step was skipped (as a gradient
            # scaler skips one that overflowed), the next clock begins.
            self._synchronized = False
            slot.passes += 1
            if slot.passes > self._passes:
                slot.version = None  # its write is this error's
                raise _state_error(
                    f"gradient of '{slot.name}' computed {slot.passes} times "
                    f"before step() (backward_passes_per_step="
                    f"{self._passes}); call step() after each "
                    f"backward_passes_per_step backward passes")
            if slot.passes == self._passes:
                self._push([slot])
        return hook

    # ---- pushing ----
    def _adopt_grad(self, slot):
        """Make the registered buffer the parameter's gradient again (after
        zero_grad(set_to_none=True), or code that replaced p.grad)."""
        p = slot.tensor
        if p.grad is None:
            slot.grad.zero_()
        elif p.grad.data_ptr() != slot.grad.data_ptr():
            slot.grad.copy_(p.grad)
        else:
            return
        p.grad = slot.grad

    def _push(self, slots):
        if not any(s.pushed for s in self._slots):
            self._check_lr()  # a scheduler's change, from this clock on
        for s in slots:
            if s.is_buffer:
                s.grad.copy_(s.tensor)
            else:
                self._adopt_grad(s)
                s.version = s.grad._version
            s.pushed = True
        self._pending.append(self._ctx.push([s.id for s in slots]))
        if len(self._pending) >= _REAP_EVERY:
            self._pending = [r for r in self._pending if not r.test()]

    def _wait_pushes(self):
        pending, self._pending = self._pending, []
        for r in pending:
            r.wait()

    def _edited(self):
        """The gradients written after their push was posted, while the
        aggregators could still read them (in place, with zero copy): their
        version counters moved (an in-place write such as clipping), or
        p.grad is another tensor now (the edit never reached the push)."""
        edited = []
        for s in self._slots:
            if not s.pushed or s.is_buffer or s.version is None:
                continue
            g = s.tensor.grad
            if g is None or g.data_ptr() != s.grad.data_ptr():
                edited.append(f"'{s.name}' (p.grad replaced)")
            elif g._version != s.version:
                edited.append(f"'{s.name}'")
        return edited

    def _sync_clock(self):
        """End this step's clock: push what no hook pushed (unused in this
        forward pass, buffers, or every tensor without push_in_backward),
        wait for the pushes, pull. In sum mode, every worker's mean into
        p.grad."""
        left = [s for s in self._slots if not s.pushed]
        if left:
            self._push(left)
        self._wait_pushes()
        self._ctx.pull().wait()
        edited = self._edited()
        for s in self._slots:
            s.passes, s.pushed = 0, False
        if self._sum:
            # The mean into the gradients (p.grad): their push completed,
            # so the aggregators no longer read them.
            n = float(self._ctx.num_workers)
            for total, g in zip(self._params.runs, self._grads.runs):
                torch.div(total, n, out=g)
            for s in self._slots:
                if s.is_buffer:
                    s.tensor.copy_(s.grad)
        if edited:
            raise _state_error(self._edited_message(edited))

    def _edited_message(self, edited):
        names = ", ".join(edited[:8]) + \
            (f" and {len(edited) - 8} more" if len(edited) > 8 else "")
        said = (f"gradient(s) {names} written between backward and step() "
                f"while the aggregators could still read them in place "
                f"(each is pushed as soon as backward produced it): ")
        if self._sum:
            return said + (
                "this clock's sum may mix old and new values, and the step "
                "was not applied. Edit the gradients after "
                "opt.synchronize() (p.grad then holds every worker's mean), "
                "then step() under opt.skip_synchronize()")
        return said + (
            "the aggregators applied a sum that may mix old and new values. "
            "With the aggregators' SGD no worker holds the summed gradient: "
            "to edit each worker's own before it is pushed, wrap with "
            "push_in_backward=False; to clip the sum, use "
            "STRATA_OPTIMIZER=sum and opt.synchronize()")

    # ---- the optimizer's interface ----
    @torch.no_grad()
    def step(self, closure=None):
        if closure is not None:
            raise _state_error("step(closure) is not supported: run the "
                               "forward and backward pass before step()")
        if self._ctx.finalized:
            raise _state_error("step() after the Strata context finalized")
        if self._rounds:
            return self._round_step()
        self._compute += time.perf_counter() - self._step_started
        if self._synchronized:
            self._synchronized = False
        elif self._skip_sync:
            raise _state_error("step() under skip_synchronize() without "
                               "synchronize() since the last step(): call "
                               "opt.synchronize() after backward")
        else:
            self._sync_clock()
        if self._sum:
            super(self.__class__, self).step()
        self._steps += 1
        if self._policy == "gssp" and self._steps % self._epoch_steps == 0:
            # This worker's speed: its compute per step, without the waits
            # for the group's slowest member inside step().
            self._ctx.epoch_end(max(self._compute / self._epoch_steps, 1e-9))
            self._compute = 0.0
        self._step_started = time.perf_counter()
        return None

    def _round_step(self):
        super(self.__class__, self).step()
        now = time.perf_counter()
        seconds = max(now - self._step_started, 1e-9)
        self.synced = self._ctx.round_ready(seconds)
        if self.synced:
            self._ctx.round_sync()
        self._steps += 1
        self._step_started = time.perf_counter()
        return None

    def synchronize(self):
        """Horovod's synchronize(): end this step's clock now, so that the
        gradients can be edited (clipped, scaled, checked) before step().
        With STRATA_OPTIMIZER=sum p.grad then holds every worker's mean (what
        step() would apply), and the aggregators no longer read it; step()
        (under skip_synchronize(), or not: it does not synchronize twice)
        applies it with the wrapped optimizer. Under esync and fedavg the
        gradients are each worker's own and models are averaged at rounds:
        nothing to do (step() still runs the round). With the aggregators'
        SGD (bsp, ssp, asp, gssp) the aggregators apply the update to the
        sum and no worker ever holds it: refused (wrap with
        push_in_backward=False to edit each worker's gradient before
        step() pushes it)."""
        if self._rounds:
            return
        if not self._sum:
            raise _config_error(
                f"synchronize() with STRATA_POLICY={self._policy} and the "
                f"aggregators' SGD: they apply the update to the sum of the "
                f"gradients, which no worker holds. To clip the sum use "
                f"STRATA_POLICY=bsp with STRATA_OPTIMIZER=sum; to edit each "
                f"worker's gradient before it is pushed, wrap with "
                f"push_in_backward=False")
        if self._ctx.finalized:
            raise _state_error("synchronize() after the Strata context "
                               "finalized")
        if not self._synchronized:
            with torch.no_grad():
                self._sync_clock()
            self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """step() inside applies what synchronize() left in p.grad without
        synchronizing (Horovod's shape); it refuses to run if synchronize()
        was not called since the last step(). No effect under esync and
        fedavg."""
        self._skip_sync = True
        try:
            yield self
        finally:
            self._skip_sync = False

    @contextlib.contextmanager
    def untimed(self):
        """Time spent inside is not part of this worker's step time (what
        esync's State Server and gssp's grouping are told): evaluation
        between steps, or waiting for another worker's. Without it the next
        step() reports the step plus all of that, and under esync the
        worker counts as the slowest for a round."""
        began = time.perf_counter()
        try:
            yield self
        finally:
            self._step_started += time.perf_counter() - began

    def _check_lr(self):
        """With the aggregators' SGD, an LR scheduler's change reaches them
        (strata_set_lr) before this clock's first push."""
        if self._sum or self._rounds:
            return
        lrs = {float(g["lr"]) for g in self.param_groups}
        if len(lrs) > 1:
            raise _config_error("param groups with different learning rates: "
                                "the aggregators apply one (use "
                                "STRATA_OPTIMIZER=sum)")
        lr = lrs.pop()
        if lr != self._lr:
            self._ctx.set_lr(lr)
            self._lr = lr

    def zero_grad(self, set_to_none=False):
        """Zeroes the gradients in place: they stay the buffers Strata pushes
        from (set_to_none is accepted, and ignored, for that reason)."""
        if self._rounds:
            return super(self.__class__, self).zero_grad(set_to_none)
        if self._pending:
            raise _state_error("zero_grad() while gradients are being "
                               "pushed: call step() first")
        self._synchronized = False  # what synchronize() left is dropped
        for s in self._slots:
            g = s.tensor.grad
            if not s.is_buffer and (g is None or
                                    g.data_ptr() != s.grad.data_ptr()):
                s.tensor.grad = s.grad
        for g in self._grads.runs:
            g.zero_()
        for g in self.param_groups:  # parameters Strata does not carry
            for p in g["params"]:
                if p.grad is not None and not any(p is s.tensor
                                                  for s in self._slots):
                    p.grad.zero_()

    def _detach(self):
        """Before the context finalizes: tensors leave Strata's memory, so
        the model stays usable. strata_finalize frees the blocks (strata_free
        would refuse the gradients' until then: the aggregators read them in
        place)."""
        try:
            self._wait_pushes()
        except StrataError:
            pass
        with torch.no_grad():
            for s in self._slots:
                t = s.tensor
                if self._params.holds(t):
                    t.data = t.data.clone()
                if t.grad is not None and self._grads.holds(t.grad):
                    t.grad = t.grad.clone()
        self._grad_accs.clear()

    @property
    def strata_context(self):
        return self._ctx


def DistributedOptimizer(optimizer, named_parameters=None, *,
                         named_buffers=None, backward_passes_per_step=1,
                         epoch_steps=100, context=None,
                         retain_freed_memory=True, push_in_backward=True):
    """Wrap a torch optimizer so that training goes through Strata.

    named_parameters: model.named_parameters() (names identify tensors
        across workers; without it, param.0, param.1, ...).
    named_buffers: model.named_buffers(), to average float buffers such as
        BatchNorm's running statistics where the mode allows it (esync and
        fedavg at every round, bsp with STRATA_OPTIMIZER=sum at every step);
        with the aggregators' SGD they stay each worker's own.
    backward_passes_per_step: backward passes accumulated per step().
    push_in_backward: push each gradient from a hook as soon as backward
        produced it (overlapping the pushes with the rest of backward); the
        aggregators may then read it until step(), so nothing may write it
        there (step() raises, naming it, if something did). False: step()
        pushes every gradient, so the program may edit them between
        backward and step() (e.g. clip each worker's gradient under the
        aggregators' SGD); backward_passes_per_step is then whatever
        accumulates before step().
    epoch_steps: under gssp, steps between the epoch ends that let the
        coordinator measure speeds and regroup workers.
    context: a strata.Context (default: the one strata.init() made).
    retain_freed_memory: keep what a step frees in glibc's heap for the next
        step (up to 128 MB, not given back to the kernel) instead of faulting
        it in again every step; False leaves the process's malloc alone
        (docs/python.md, "Performance").

    Parameters (and gradients) move into Strata's memory: create the
    wrapper after the model is on its device and after loading a checkpoint;
    every worker then starts from the first worker's model.
    """
    ctx = context if context is not None else _core.context()
    if not ctx.is_worker:
        raise _state_error("DistributedOptimizer on an aggregator rank")
    if backward_passes_per_step < 1 or epoch_steps < 1:
        raise ValueError("backward_passes_per_step and epoch_steps must be "
                         ">= 1")
    if retain_freed_memory:
        _retain_freed_memory()
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    state = optimizer.state_dict() if optimizer.state else None
    wrapped = cls(optimizer.param_groups, named_parameters, named_buffers, ctx,
                  backward_passes_per_step, epoch_steps, push_in_backward)
    if state is not None:
        wrapped.load_state_dict(state)
    return wrapped

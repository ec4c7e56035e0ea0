"""Contexts, requests and errors over libstrata."""

import atexit
import ctypes
import sys

from strata import _lib

_c = _lib.lib


class StrataError(RuntimeError):
    """A libstrata call failed. status is the strata_status_t value, name its
    STRATA_* name; the message says what failed and why."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.name = _lib.STATUS_NAME.get(status, f"status {status}")


class TimeoutError(StrataError):
    """STRATA_ERR_TIMEOUT: a wait ran out (the request is still pending)."""


class PeerError(StrataError):
    """STRATA_ERR_PEER: a rank of the job died or disconnected."""


_ERRORS = {
    _lib.STATUS["STRATA_ERR_TIMEOUT"]: TimeoutError,
    _lib.STATUS["STRATA_ERR_PEER"]: PeerError,
}


def strerror(status):
    return _c.strata_strerror(status).decode()


def version():
    """The version of the libstrata loaded, "MAJOR.MINOR.PATCH"."""
    return _c.strata_version_string().decode()


def last_error(ctx=None):
    """The text of the last failure (strata_last_error): ctx's job's failure
    if it failed, else the last error of this thread's libstrata calls."""
    handle = ctx._ctx if ctx is not None and ctx._ctx else None
    buf = ctypes.create_string_buffer(1024)
    n = _c.strata_last_error(handle, buf, len(buf))
    return buf.value.decode(errors="replace") if n else ""


def _error(status, what, ctx=None):
    text = last_error(ctx)
    message = f"{what}: {text or strerror(status)}"
    return _ERRORS.get(status, StrataError)(status, message)


def _check(status, what, ctx=None):
    if status != 0:
        raise _error(status, what, ctx)


class Request:
    """A push or pull in flight (strata_request_t)."""

    __slots__ = ("_req", "_ctx", "_what")

    def __init__(self, ctx, what):
        self._req = ctypes.c_void_p()
        self._ctx = ctx
        self._what = what

    @property
    def done(self):
        return not self._req

    def wait(self, timeout_ms=-1):
        """Wait at most timeout_ms (negative: STRATA_TIMEOUT_MS). Raises
        TimeoutError when it ran out; the request stays pending then."""
        if self._req:
            _check(_c.strata_wait(ctypes.byref(self._req), timeout_ms),
                   self._what, self._ctx)

    def test(self):
        """True once complete (raises if it failed)."""
        if not self._req:
            return True
        done = ctypes.c_bool()
        st = _c.strata_test(ctypes.byref(self._req), ctypes.byref(done))
        if done.value:
            self._req = ctypes.c_void_p()
        _check(st, self._what, self._ctx)
        return bool(done.value)


WORKER, AGGREGATOR = 0, 1


class Context:
    """One Strata job membership (strata_ctx_t). Context(settings) joins the
    job: settings is a dict of STRATA_* (or lower-case) keys overriding the
    environment."""

    def __init__(self, settings=None):
        items = [f"{k}={v}".encode() for k, v in (settings or {}).items()]
        argv = (ctypes.c_char_p * (len(items) + 1))(*items, None)
        self._ctx = ctypes.c_void_p()
        self._closers = []
        _check(_c.strata_init_with(argv, ctypes.byref(self._ctx)),
               "strata_init", self)
        # Fixed for the job: still answered after finalize().
        h = self._ctx
        self._fixed = {"role": _c.strata_role(h), "rank": _c.strata_rank(h),
                       "size": _c.strata_size(h),
                       "num_workers": _c.strata_num_workers(h),
                       "num_aggregators": _c.strata_num_aggregators(h),
                       "worker_index": _c.strata_worker_index(h)}

    # ---- lifetime ----
    def _handle(self):
        if not self._ctx:
            raise StrataError(_lib.STATUS["STRATA_ERR_STATE"],
                              "the Strata context is finalized")
        return self._ctx

    @property
    def finalized(self):
        return not self._ctx

    def on_finalize(self, fn):
        """Call fn() first when the context finalizes (wrappers copy their
        tensors out of Strata's memory there)."""
        self._closers.append(fn)

    def finalize(self):
        """Leave the job. Idempotent. Raises the first error the context met."""
        if not self._ctx:
            return
        for fn in reversed(self._closers):
            fn()
        self._closers.clear()
        ctx, self._ctx = self._ctx, ctypes.c_void_p()
        _check(_c.strata_finalize(ctx), "strata_finalize")

    def serve(self):
        _check(_c.strata_serve(self._handle()), "strata_serve", self)

    def last_error(self):
        return last_error(self)

    # ---- the job's settings ----
    def setting(self, key):
        """The effective value of a setting ("policy", "STRATA_LR", ...) as
        text, wherever it was set (environment, STRATA_CONFIG, defaults)."""
        buf = ctypes.create_string_buffer(256)
        need = ctypes.c_size_t()
        st = _c.strata_setting(self._handle(), key.encode(), buf, len(buf),
                               ctypes.byref(need))
        if st == _lib.STATUS["STRATA_ERR_RANGE"]:
            buf = ctypes.create_string_buffer(need.value)
            st = _c.strata_setting(self._handle(), key.encode(), buf,
                                   len(buf), None)
        _check(st, f"strata_setting('{key}')", self)
        return buf.value.decode()

    def set_lr(self, lr):
        """The aggregators' SGD learning rate from the first clock this
        worker has not begun to push (strata_set_lr)."""
        _check(_c.strata_set_lr(self._handle(), float(lr)),
               f"strata_set_lr({lr})", self)

    # ---- queries ----
    @property
    def role(self):
        return self._fixed["role"]

    @property
    def is_worker(self):
        return self.role == WORKER

    @property
    def rank(self):
        return self._fixed["rank"]

    @property
    def size(self):
        return self._fixed["size"]

    @property
    def local_rank(self):
        return _c.strata_local_rank(self._handle())

    @property
    def num_workers(self):
        return self._fixed["num_workers"]

    @property
    def num_aggregators(self):
        return self._fixed["num_aggregators"]

    @property
    def worker_index(self):
        return self._fixed["worker_index"]

    @property
    def group(self):
        return _c.strata_group(self._handle())

    @property
    def clock(self):
        return _c.strata_clock(self._handle())

    @property
    def transport(self):
        return _c.strata_transport(self._handle()).decode()

    @property
    def partition_bytes(self):
        """The partition size: STRATA_PARTITION_BYTES or the engine's pick
        for the model (0 before commit)."""
        return _c.strata_partition_bytes(self._handle())

    def metrics(self):
        m = _lib.Metrics(size=ctypes.sizeof(_lib.Metrics))
        _check(_c.strata_metrics(self._handle(), ctypes.byref(m)),
               "strata_metrics", self)
        return {name: (list(getattr(m, name)) if name == "staleness"
                       else getattr(m, name)) for name, _ in m._fields_
                if name != "size"}

    # ---- memory and tensors ----
    def alloc(self, nbytes):
        """nbytes of memory every transport writes into directly; returns
        its address (freed by free() or when the context finalizes)."""
        p = ctypes.c_void_p()
        _check(_c.strata_alloc(self._handle(), nbytes, ctypes.byref(p)),
               f"strata_alloc({nbytes})", self)
        return p.value

    def free(self, address):
        _c.strata_free(self._handle(), address)

    def register(self, name, param, grad, count, dtype):
        """Register a tensor (addresses of its parameter and gradient
        buffers); returns its id."""
        tid = ctypes.c_int()
        _check(_c.strata_tensor_register(self._handle(), name.encode(), param,
                                         grad, count, dtype,
                                         ctypes.byref(tid)),
               f"strata_tensor_register('{name}')", self)
        return tid.value

    def commit(self):
        _check(_c.strata_commit(self._handle()), "strata_commit", self)

    # ---- data ----
    def push(self, ids=None):
        """Push the gradients of the tensors with these ids (all when None);
        returns the Request."""
        req = Request(self, "strata_push")
        if ids is None:
            arr, n = None, 0
        else:
            n = len(ids)
            arr = (ctypes.c_int * n)(*ids)
        _check(_c.strata_push(self._handle(), arr, n, ctypes.byref(req._req)),
               "strata_push", self)
        return req

    def pull(self, clock=None):
        """The model of clock (default: the current one); returns the
        Request."""
        req = Request(self, "strata_pull")
        c = self.clock if clock is None else clock
        _check(_c.strata_pull(self._handle(), c, ctypes.byref(req._req)),
               f"strata_pull({c})", self)
        return req

    def step(self):
        _check(_c.strata_step(self._handle()), "strata_step", self)

    def epoch_end(self, iteration_seconds=0.0):
        _check(_c.strata_epoch_end(self._handle(), iteration_seconds),
               "strata_epoch_end", self)

    def round_ready(self, step_seconds):
        ready = ctypes.c_bool()
        _check(_c.strata_round_ready(self._handle(), step_seconds,
                                     ctypes.byref(ready)),
               "strata_round_ready", self)
        return ready.value

    def round_sync(self):
        _check(_c.strata_round_sync(self._handle()), "strata_round_sync", self)


# ---- the log ----

_LEVELS = {0: 40, 1: 30, 2: 20, 3: 10, 4: 5}  # strata level -> logging's
_log_callback = None  # kept alive while libstrata holds it


def capture_log(logger=None):
    """Send libstrata's log lines to a Python logger (default: "strata")
    instead of stderr; None restores stderr when given False."""
    global _log_callback
    if logger is False:
        _c.strata_log_set_handler(_lib.LOG_FN(), None)
        _log_callback = None
        return
    import logging
    target = logger or logging.getLogger("strata")

    def forward(arg, level, line):
        try:
            target.log(_LEVELS.get(level, 10), line.decode(errors="replace"))
        except Exception:  # never raise into C
            pass
    _log_callback = _lib.LOG_FN(forward)
    _c.strata_log_set_handler(_log_callback, None)


def set_log_level(name):
    """"error", "warn", "info", "debug" or "trace" (per process)."""
    levels = ["error", "warn", "info", "debug", "trace"]
    _c.strata_log_set_level(levels.index(name.lower()))


# ---- the process's default context ----

_default = None


def init(settings=None, serve=True):
    """Join the job (strata_init) and return the context. On an aggregator
    rank, with serve=True, serve until the workers finish, then exit the
    process: one script runs under strata-run --spmd, mpirun, srun and
    torchrun, where every rank runs it."""
    global _default
    if _default is not None and not _default.finalized:
        raise StrataError(_lib.STATUS["STRATA_ERR_STATE"],
                          "strata.init: already initialized")
    ctx = Context(settings)
    _default = ctx
    if serve and ctx.role == AGGREGATOR:
        status = 0
        try:
            ctx.serve()
        except StrataError as e:
            print(f"strata: aggregator rank {ctx.rank}: {e}", file=sys.stderr)
            status = 1
        try:
            ctx.finalize()
        except StrataError as e:
            if status == 0:
                print(f"strata: aggregator: {e}", file=sys.stderr)
            status = 1
        sys.exit(status)
    return ctx


def context():
    """The context init() made."""
    if _default is None or _default.finalized:
        raise StrataError(_lib.STATUS["STRATA_ERR_STATE"],
                          "strata: call strata.init() first")
    return _default


def finalize():
    """Leave the job (the default context). Safe to call twice."""
    if _default is not None:
        _default.finalize()


def rank():
    return context().rank


def size():
    return context().size


def worker_index():
    return context().worker_index


def num_workers():
    return context().num_workers


def num_aggregators():
    return context().num_aggregators


@atexit.register
def _finalize_at_exit():
    # A worker that ends without finalize() would look dead to the others.
    if _default is not None and not _default.finalized:
        try:
            _default.finalize()
        except StrataError as e:
            print(f"strata: finalize at exit: {e}", file=sys.stderr)
    if _log_callback is not None:  # no calls into a finalizing interpreter
        capture_log(False)

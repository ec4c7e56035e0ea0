"""Strata from Python: gradient aggregation for heterogeneous clusters.

    import strata
    strata.init()              # aggregator ranks serve here and exit
    ...                        # strata.torch.DistributedOptimizer for PyTorch
    strata.finalize()

The package is pure Python over libstrata's C API (ctypes): no compiler and
no framework headers at install time. docs/python.md is the manual.
"""

from strata._core import (AGGREGATOR, WORKER, Context, PeerError, Request,
                          StrataError, TimeoutError, capture_log, context,
                          finalize, init, last_error, num_aggregators,
                          num_workers, rank, set_log_level, size, strerror,
                          version, worker_index)

__all__ = [
    "AGGREGATOR", "WORKER", "Context", "PeerError", "Request", "StrataError",
    "TimeoutError", "capture_log", "context", "finalize", "init",
    "last_error", "num_aggregators", "num_workers", "rank", "set_log_level",
    "size", "strerror", "version", "worker_index",
]

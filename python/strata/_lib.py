"""libstrata through ctypes: finding the library, its prototypes, its enums.

Every C function the package calls is declared in PROTOTYPES with the C
types of include/strata/strata.h, as text; tests/python/test_prototypes.py
parses the header and fails when a declaration here and there differ, or when
a function of the header is neither bound nor listed in UNBOUND.
"""

import ctypes
import ctypes.util
import os

# C type (as the header spells it) -> ctypes type.
class Metrics(ctypes.Structure):
    """strata_metrics_t (see strata.h)."""

    _fields_ = [
        ("size", ctypes.c_size_t),
        ("bytes_pushed", ctypes.c_uint64),
        ("bytes_pulled", ctypes.c_uint64),
        ("pushes", ctypes.c_uint64),
        ("pulls", ctypes.c_uint64),
        ("staging_copies", ctypes.c_uint64),
        ("staging_bytes", ctypes.c_uint64),
        ("reductions", ctypes.c_uint64),
        ("reduce_ns", ctypes.c_uint64),
        ("updates", ctypes.c_uint64),
        ("clock", ctypes.c_int64),
        ("staleness", ctypes.c_uint64 * 32),
        ("rounds", ctypes.c_uint64),
        ("push_handoff_ns", ctypes.c_uint64),
        ("push_post_ns", ctypes.c_uint64),
        ("round_trip_ns", ctypes.c_uint64),
        ("pull_wakeup_ns", ctypes.c_uint64),
        ("reduce_wait_ns", ctypes.c_uint64),
        ("serve_ns", ctypes.c_uint64),
        ("in_place_pushes", ctypes.c_uint64),
        ("in_place_bytes", ctypes.c_uint64),
        ("protected_clock", ctypes.c_int64),
        ("takeovers", ctypes.c_uint64),
        ("takeover_lost_rank", ctypes.c_int64),
        ("takeover_taker_rank", ctypes.c_int64),
        ("takeover_protected_clock", ctypes.c_int64),
        ("takeover_resume_clock", ctypes.c_int64),
        ("takeover_lost_clocks", ctypes.c_int64),
        ("takeover_loss_ns", ctypes.c_uint64),
        ("takeover_rebuilt_ns", ctypes.c_uint64),
        ("takeover_told_ns", ctypes.c_uint64),
        ("takeover_installed_ns", ctypes.c_uint64),
        ("takeover_resumed_ns", ctypes.c_uint64),
    ]


# void (*)(void *arg, strata_log_level_t level, const char *line)
LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int,
                          ctypes.c_char_p)

CTYPES = {
    "void": None,
    "int": ctypes.c_int,
    "int64_t": ctypes.c_int64,
    "size_t": ctypes.c_size_t,
    "double": ctypes.c_double,
    "bool": ctypes.c_bool,
    "strata_status_t": ctypes.c_int,
    "strata_role_t": ctypes.c_int,
    "strata_dtype_t": ctypes.c_int,
    "strata_log_level_t": ctypes.c_int,
    "strata_log_fn": LOG_FN,
    "char *": ctypes.c_char_p,
    "const char *": ctypes.c_char_p,
    "const char *const *": ctypes.POINTER(ctypes.c_char_p),
    "void *": ctypes.c_void_p,
    "void **": ctypes.POINTER(ctypes.c_void_p),
    "strata_ctx_t *": ctypes.c_void_p,
    "const strata_ctx_t *": ctypes.c_void_p,
    "strata_ctx_t **": ctypes.POINTER(ctypes.c_void_p),
    "strata_request_t **": ctypes.POINTER(ctypes.c_void_p),
    "const int *": ctypes.POINTER(ctypes.c_int),
    "int *": ctypes.POINTER(ctypes.c_int),
    "bool *": ctypes.POINTER(ctypes.c_bool),
    "int64_t *": ctypes.POINTER(ctypes.c_int64),
    "size_t *": ctypes.POINTER(ctypes.c_size_t),
    "strata_metrics_t *": ctypes.POINTER(Metrics),
}

# name: (return type, (argument types...)), as in strata.h.
PROTOTYPES = {
    "strata_strerror": ("const char *", ("strata_status_t",)),
    "strata_version_string": ("const char *", ()),
    "strata_init_with": ("strata_status_t",
                         ("const char *const *", "strata_ctx_t **")),
    "strata_finalize": ("strata_status_t", ("strata_ctx_t *",)),
    "strata_serve": ("strata_status_t", ("strata_ctx_t *",)),
    "strata_role": ("strata_role_t", ("const strata_ctx_t *",)),
    "strata_rank": ("int", ("const strata_ctx_t *",)),
    "strata_size": ("int", ("const strata_ctx_t *",)),
    "strata_local_rank": ("int", ("const strata_ctx_t *",)),
    "strata_num_workers": ("int", ("const strata_ctx_t *",)),
    "strata_num_aggregators": ("int", ("const strata_ctx_t *",)),
    "strata_worker_index": ("int", ("const strata_ctx_t *",)),
    "strata_group": ("int", ("const strata_ctx_t *",)),
    "strata_clock": ("int64_t", ("const strata_ctx_t *",)),
    "strata_transport": ("const char *", ("const strata_ctx_t *",)),
    "strata_partition_bytes": ("size_t", ("const strata_ctx_t *",)),
    "strata_alloc": ("strata_status_t", ("strata_ctx_t *", "size_t", "void **")),
    "strata_free": ("void", ("strata_ctx_t *", "void *")),
    "strata_tensor_register": ("strata_status_t",
                               ("strata_ctx_t *", "const char *", "void *",
                                "void *", "size_t", "strata_dtype_t", "int *")),
    "strata_commit": ("strata_status_t", ("strata_ctx_t *",)),
    "strata_push": ("strata_status_t",
                    ("strata_ctx_t *", "const int *", "size_t",
                     "strata_request_t **")),
    "strata_pull": ("strata_status_t",
                    ("strata_ctx_t *", "int64_t", "strata_request_t **")),
    "strata_wait": ("strata_status_t", ("strata_request_t **", "int")),
    "strata_test": ("strata_status_t", ("strata_request_t **", "bool *")),
    "strata_step": ("strata_status_t", ("strata_ctx_t *",)),
    "strata_set_lr": ("strata_status_t", ("strata_ctx_t *", "double")),
    "strata_epoch_end": ("strata_status_t", ("strata_ctx_t *", "double")),
    "strata_round_ready": ("strata_status_t",
                           ("strata_ctx_t *", "double", "bool *")),
    "strata_round_sync": ("strata_status_t", ("strata_ctx_t *",)),
    "strata_metrics": ("strata_status_t",
                       ("strata_ctx_t *", "strata_metrics_t *")),
    "strata_report": ("strata_status_t", ("strata_ctx_t *", "const char *")),
    "strata_group_clocks": ("strata_status_t",
                            ("strata_ctx_t *", "int64_t *", "size_t",
                             "size_t *")),
    "strata_last_error": ("size_t", ("const strata_ctx_t *", "char *",
                                     "size_t")),
    "strata_log_set_handler": ("void", ("strata_log_fn", "void *")),
    "strata_log_set_level": ("void", ("strata_log_level_t",)),
    "strata_setting": ("strata_status_t",
                       ("const strata_ctx_t *", "const char *", "char *",
                        "size_t", "size_t *")),
}

# Functions of strata.h the package does not call, and why.
UNBOUND = {
    "strata_init": "strata_init_with(NULL) is the same call",
}

# Status codes: name -> value, as STRATA_STATUS_LIST has them.
STATUS = {
    "STRATA_OK": 0,
    "STRATA_INPROGRESS": 1,
    "STRATA_ERR_INVALID": 2,
    "STRATA_ERR_CONFIG": 3,
    "STRATA_ERR_NOMEM": 4,
    "STRATA_ERR_IO": 5,
    "STRATA_ERR_TIMEOUT": 6,
    "STRATA_ERR_PEER": 7,
    "STRATA_ERR_PROTO": 8,
    "STRATA_ERR_AUTH": 9,
    "STRATA_ERR_UNSUPPORTED": 10,
    "STRATA_ERR_NO_DEVICE": 11,
    "STRATA_ERR_AGAIN": 12,
    "STRATA_ERR_MISMATCH": 13,
    "STRATA_ERR_STATE": 14,
    "STRATA_ERR_RANGE": 15,
    "STRATA_ERR_CANCELED": 16,
    "STRATA_ERR_NOFILE": 17,
}
STATUS_NAME = {v: k for k, v in STATUS.items()}

DTYPES = {"STRATA_FP32": 0, "STRATA_FP64": 1, "STRATA_FP16": 2,
          "STRATA_BF16": 3}
ROLES = {"STRATA_ROLE_WORKER": 0, "STRATA_ROLE_AGGREGATOR": 1}
LOG_LEVELS = {"STRATA_LOG_ERROR": 0, "STRATA_LOG_WARN": 1,
              "STRATA_LOG_INFO": 2, "STRATA_LOG_DEBUG": 3,
              "STRATA_LOG_TRACE": 4}

# The package's own settings live under STRATA_EXT_, which the library never
# reads nor refuses (strata.h).
LIBRARY_ENV = "STRATA_EXT_PY_LIBRARY"


def _candidates():
    explicit = os.environ.get(LIBRARY_ENV)
    if explicit:
        return [explicit]
    here = os.path.dirname(os.path.abspath(__file__))
    found = []
    try:
        from strata import _paths  # written by CMake, beside this file
        found.append(os.path.normpath(os.path.join(here, _paths.LIBRARY)))
    except ImportError:
        pass
    system = ctypes.util.find_library("strata")
    if system:
        found.append(system)
    found.append("libstrata.so.0")
    return found


def _load():
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
            continue
        for name, (ret, args) in PROTOTYPES.items():
            fn = getattr(lib, name)
            fn.restype = CTYPES[ret]
            fn.argtypes = [CTYPES[a] for a in args]
        return lib, path
    raise ImportError("strata: cannot load libstrata (set " + LIBRARY_ENV +
                      " to its path): " + "; ".join(errors))


lib, path = _load()

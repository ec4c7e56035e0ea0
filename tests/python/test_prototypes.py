"""The package's ctypes declarations match include/strata/strata.h: every
function, its return and argument types, the status codes, dtypes, roles and
the metrics struct. A change to the header that the binding does not follow
fails here."""

import ctypes
import re

from conftest import SOURCE
from strata import _lib

HEADER = (SOURCE / "include" / "strata" / "strata.h").read_text()


def _code():
    """The header without comments and preprocessor lines, one space apart."""
    text = re.sub(r"/\*.*?\*/", " ", HEADER, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = "\n".join(l for l in text.splitlines()
                     if not l.lstrip().startswith("#"))
    return text


def _norm(ctype):
    ctype = re.sub(r"\s+", " ", ctype.strip())
    ctype = re.sub(r"\s*\*\s*", " *", ctype).replace("* *", "**")
    return ctype.replace(" *const", " *const").strip()


def header_functions():
    """name -> (return type, (argument types...)) of every declaration."""
    code = re.sub(r"\s+", " ", _code())
    found = {}
    for m in re.finditer(r"([A-Za-z_][\w ]*?[\s*]+)(strata_\w+)\s*\(([^()]*)\)"
                         r"\s*;", code):
        ret, name, args = m.group(1), m.group(2), m.group(3)
        ret = ret.replace("extern", "").strip()
        if ret.startswith("typedef"):
            continue
        types = []
        for a in ([] if args.strip() in ("", "void") else args.split(",")):
            a = a.strip()
            # drop the parameter's name: the last identifier
            t = re.sub(r"\b\w+$", "", a).strip()
            types.append(_norm(t))
        found[name] = (_norm(ret), tuple(types))
    return found


def test_every_header_function_is_bound_with_its_c_types():
    header = header_functions()
    assert len(header) > 25, "the header parser found too few functions"
    problems = []
    for name, decl in header.items():
        if name in _lib.UNBOUND:
            continue
        if name not in _lib.PROTOTYPES:
            problems.append(f"{name}{decl}: in strata.h, not in "
                            f"strata._lib.PROTOTYPES (nor UNBOUND)")
            continue
        bound = _lib.PROTOTYPES[name]
        bound = (_norm(bound[0]), tuple(_norm(t) for t in bound[1]))
        if bound != decl:
            problems.append(f"{name}: strata.h has {decl}, the binding "
                            f"{bound}")
    for name in _lib.PROTOTYPES:
        if name not in header:
            problems.append(f"{name}: bound but not in strata.h")
    for name, (ret, args) in _lib.PROTOTYPES.items():
        for t in (ret,) + args:
            if t not in _lib.CTYPES:
                problems.append(f"{name}: no ctypes type for '{t}'")
    assert not problems, "\n".join(problems)


def test_every_bound_function_exists_in_the_library():
    missing = [n for n in _lib.PROTOTYPES if not hasattr(_lib.lib, n)]
    assert not missing


def _enum(macro_or_typedef_body):
    return dict((n, int(v)) for n, v in macro_or_typedef_body)


def test_status_codes_match():
    body = re.findall(r"X\((STRATA_\w+),\s*(\d+),", HEADER)
    assert _enum(body) == _lib.STATUS


def _typedef_enum(name):
    m = re.search(r"typedef enum \w+ \{([^{}]*)\}\s*" + name + ";", _code(),
                  re.S)
    assert m, f"enum {name} not found in strata.h"
    values, nxt = {}, 0
    for item in m.group(1).split(","):
        item = item.strip()
        if not item:
            continue
        key, _, val = item.partition("=")
        nxt = int(val, 0) if val.strip() else nxt
        values[key.strip()] = nxt
        nxt += 1
    return values


def test_dtypes_and_roles_match():
    assert _typedef_enum("strata_dtype_t") == _lib.DTYPES
    assert _typedef_enum("strata_role_t") == _lib.ROLES


_FIELD_TYPES = {"uint64_t": ctypes.c_uint64, "int64_t": ctypes.c_int64,
                "uint32_t": ctypes.c_uint32, "int32_t": ctypes.c_int32,
                "double": ctypes.c_double, "size_t": ctypes.c_size_t,
                "bool": ctypes.c_bool, "int": ctypes.c_int}


def _struct_fields(name):
    m = re.search(r"typedef struct \w+ \{([^{}]*)\}\s*" + name + ";", _code(),
                  re.S)
    assert m, f"struct {name} not found in strata.h"
    fields = []
    for decl in m.group(1).split(";"):
        decl = " ".join(decl.split())
        if not decl:
            continue
        ctype, names = decl.split(" ", 1)
        for n in names.split(","):
            n = n.strip()
            arr = re.match(r"(\w+)\[(\w+)\]", n)
            if arr:
                size = arr.group(2)
                size = int(re.search(r"#define " + size + r" (\d+)",
                                     HEADER).group(1)) \
                    if not size.isdigit() else int(size)
                fields.append((arr.group(1), _FIELD_TYPES[ctype] * size))
            else:
                fields.append((n, _FIELD_TYPES[ctype]))
    return fields


def test_metrics_struct_matches():
    header = [(n, ctypes.sizeof(t)) for n, t in
              _struct_fields("strata_metrics_t")]
    bound = [(n, ctypes.sizeof(t)) for n, t in _lib.Metrics._fields_]
    assert bound == header

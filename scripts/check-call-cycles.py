#!/usr/bin/python3
"""Cycles of calls between the files of a module, from the object files.

For every library source directly under DIR (default: engine), the object
the build made from it is read with `nm`: a file depends on another when it
uses a global symbol (a function, or data) the other defines. The strongly
connected components of that graph are the groups of files that call each
other in a circle; each is printed with its files, largest first.

A component is allowed when its files are one role and its private helpers:
they share the part of their name before the first '_' (worker.c,
worker_commit.c; coord.c, coord_policy.c; agg_reduce.c counts as
aggregator's). With --check, any other component fails the run.

Usage: scripts/check-call-cycles.py [--check] [--dir DIR] BUILD_DIR
BUILD_DIR must have been configured (compile_commands.json) and built.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys

# File-name stems that belong to another role's name.
ROLE_ALIASES = {"agg": "aggregator"}


def objects(build, root, subdir):
    """{source stem: object path} for the library's sources in subdir."""
    with open(os.path.join(build, "compile_commands.json")) as f:
        cmds = json.load(f)
    want = os.path.join(root, subdir)
    objs = {}
    for c in cmds:
        src = os.path.normpath(c["file"])
        if os.path.dirname(src) != want or not src.endswith(".c"):
            continue
        args = shlex.split(c["command"]) if "command" in c else c["arguments"]
        out = c.get("output") or args[args.index("-o") + 1]
        out = os.path.join(c["directory"], out)
        stem = os.path.basename(src)[:-2]
        # A source built into several targets: one object is enough.
        if stem not in objs and os.path.exists(out):
            objs[stem] = out
    return objs


def symbols(obj):
    """(defined globals, undefined) of an object file."""
    out = subprocess.run(["nm", obj], check=True, capture_output=True,
                         text=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            undefined.add(parts[1])
        elif len(parts) == 3 and parts[1] in "TDBRGSVW":
            defined.add(parts[2])
    return defined, undefined


def graph(objs):
    syms = {f: symbols(o) for f, o in objs.items()}
    owner = {}
    for f, (defined, _) in syms.items():
        for s in defined:
            owner[s] = f
    edges = {f: set() for f in syms}
    for f, (_, undefined) in syms.items():
        for s in undefined:
            if s in owner and owner[s] != f:
                edges[f].add(owner[s])
    return edges


def sccs(edges):
    """Tarjan's algorithm, iterative."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(sorted(comp))
    return out


def role(stem):
    head = stem.split("_")[0]
    return ROLE_ALIASES.get(head, head)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("--dir", default="engine")
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    objs = objects(os.path.abspath(a.build), root, a.dir)
    if not objs:
        sys.exit(f"no objects of {a.dir}/*.c under {a.build}: build it first")
    edges = graph(objs)
    comps = sorted((c for c in sccs(edges) if len(c) > 1),
                   key=lambda c: (-len(c), c))
    nedges = sum(len(e) for e in edges.values())
    print(f"{a.dir}: {len(objs)} files, {nedges} file-to-file dependencies, "
          f"{len(comps)} cycle(s)")
    bad = 0
    for c in comps:
        roles = {role(f) for f in c}
        ok = len(roles) == 1
        bad += not ok
        print(f"  {len(c)} files{'' if ok else ' (across roles)'}: "
              + ", ".join(c))
    if a.check and bad:
        sys.exit(f"{bad} cycle(s) of calls across {a.dir}/ roles: break them "
                 "with a handler table or by moving the shared code down")


if __name__ == "__main__":
    main()

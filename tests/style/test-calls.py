#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-3-Clause
# test-calls.py --- calls between the files of daemon/ go one way only.
#
# Reads the object files under the build's daemon/ directory with nm:
# a file calls another when it uses a symbol the other defines.  Any
# cycle of such calls (two files calling each other, or a longer
# circle) fails the test and is printed with the symbols that make it.
#
# Usage: test-calls.py BUILD/daemon
import collections
import pathlib
import re
import subprocess
import sys


def symbols(objects):
    """Defined and used symbols of each object, by source file name."""
    defs, uses = {}, collections.defaultdict(set)
    out = subprocess.run(["nm", "-A", *map(str, objects)], check=True,
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        m = re.match(r"(.*?\.o):\s*(?:[0-9a-f]+\s+)?(\S)\s+(\S+)$", line)
        if not m:
            continue
        path, kind, name = m.groups()
        src = pathlib.Path(path).name.removesuffix(".o")
        if kind in "TDBR":
            defs[name] = src
        elif kind == "U":
            uses[src].add(name)
    return defs, uses


def cycles(graph):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: test-calls.py BUILD/daemon")
    objects = sorted(pathlib.Path(sys.argv[1]).rglob("*.o"))
    if not objects:
        sys.exit(f"no object files under {sys.argv[1]}")
    defs, uses = symbols(objects)
    graph = collections.defaultdict(set)
    why = collections.defaultdict(set)
    for src, names in uses.items():
        graph[src]
        for name in names:
            dst = defs.get(name)
            if dst and dst != src:
                graph[src].add(dst)
                why[src, dst].add(name)
    bad = cycles(graph)
    for comp in bad:
        print("calls go both ways between: " + ", ".join(comp),
              file=sys.stderr)
        for a in comp:
            for b in comp:
                if (a, b) in why:
                    print(f"  {a} -> {b}: {', '.join(sorted(why[a, b]))}",
                          file=sys.stderr)
    print(f"{len(objects)} objects, {len(graph)} files, "
          f"{sum(map(len, graph.values()))} one-way edges checked")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()

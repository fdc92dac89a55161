#!/usr/bin/env python3
"""Fails when a crate's production modules import each other in a circle.

    python3 scripts/import_cycles.py [CRATE_SRC_DIR ...]   (default: every appliance/*/src)

For each module file it collects the `crate::` and `super::` paths it names outside
`#[cfg(test)]` items (tests may reach anywhere), resolves each to the module that defines
it, and reports the strongly connected components of more than one module. Layering inside
a crate is then a DAG, as it is between crates (cargo enforces that one).
"""

import glob
import os
import re
import sys


def module_files(src):
    mods = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), src)[:-3]
            if rel in ("lib", "main"):
                name = "crate"
            else:
                name = "crate::" + rel.replace(os.sep, "::")
                name = name[:-5] if name.endswith("::mod") else name
            mods[name] = os.path.join(dirpath, f)
    return mods


def without_test_items(text):
    """Drops each item that follows `#[cfg(test)]` (a braced block or one `;` line)."""
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        if re.match(r"\s*#\[cfg\(test\)\]", lines[i]):
            j, depth, opened = i + 1, 0, False
            while j < len(lines):
                depth += lines[j].count("{") - lines[j].count("}")
                opened = opened or "{" in lines[j]
                if (opened and depth <= 0) or (not opened and lines[j].rstrip().endswith(";")):
                    break
                j += 1
            i = j + 1
            continue
        out.append(lines[i])
        i += 1
    return re.sub(r"//[^\n]*", "", "\n".join(out))


def edges_of(mods):
    def resolve(path):
        parts = path.split("::")
        while parts:
            if "::".join(parts) in mods:
                return "::".join(parts)
            parts.pop()
        return None

    edges = {m: set() for m in mods}
    for m, path in mods.items():
        text = without_test_items(open(path, encoding="utf-8").read())
        for mt in re.finditer(r"crate::([A-Za-z0-9_:]+?)(::\{([^;]*?)\})?[;,\s)(<>!.]", text, re.S):
            base = "crate::" + mt.group(1).rstrip(":")
            targets = [base]
            for item in (mt.group(3) or "").split(","):
                item = item.strip().split(" ")[0].split("::{")[0]
                if item:
                    targets.append(base + "::" + item)
            for t in targets:
                r = resolve(t)
                if r and r not in (m, "crate"):
                    edges[m].add(r)
        parent = m.rsplit("::", 1)[0]
        for mt in re.finditer(r"\bsuper::([A-Za-z0-9_]+)", text):
            r = resolve(parent + "::" + mt.group(1)) or (parent if parent in mods else None)
            if r and r not in (m, "crate"):
                edges[m].add(r)
    return edges


def cycles(edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
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
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    srcs = sys.argv[1:] or sorted(glob.glob(os.path.join(root, "appliance", "*", "src")))
    found = 0
    for src in srcs:
        edges = edges_of(module_files(src))
        for comp in cycles(edges):
            found += 1
            crate = os.path.basename(os.path.dirname(os.path.normpath(src)))
            print(f"{crate}: modules import each other in a circle: {', '.join(comp)}")
            for m in comp:
                inside = sorted(e for e in edges[m] if e in comp)
                print(f"    {m} -> {', '.join(inside)}")
    if found:
        sys.exit(1)
    print(f"no import circles in {len(srcs)} crates")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The engine's import graph, by file and by folder (issue 37; docs/design.md "The engine's rooms").

Usage: python3 scripts/import-graph.py [SRC] [--edges] [--dot FILE]

Reads every `.rs` file under SRC (default engine/src), resolves each `crate::...` and
`super::...` path written in it (in `use` trees, grouped or not, and in code) to the file that
defines the module it names, and prints:
- the cycles between files (strongly connected components of more than one file), each marked
  `crosses folders` when its files sit in more than one top-level folder;
- the folder graph's cycles (there must be none);
- every import against the layering: an import from a folder to a folder of a higher layer
  (the LAYERS list below, lowest first), with its file and line.
Exits 1 when a cycle crosses folders or an import runs against the layering, else 0 (CI runs
it). Comments and string literals are skipped; `crate::X` for a name lib.rs re-exports counts as
an import of the module that defines X.
"""
import os
import re
import sys
from collections import defaultdict

# The layers, lowest first: a folder may import its own layer and those below it. A top-level
# file (error.rs, ids.rs, ...) is a folder of its own name; lib.rs only declares and re-exports.
# docs/design.md ("The engine's rooms") says what each holds.
LAYERS = ["ids", "precision", "error", "world", "output", "adapter", "device", "model", "comm", "skips", "optim", "worker", "checkpoint", "runtime"]


def strip(src):
    """Removes comments and string/char literals, keeping line numbers."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth += 1
                    j += 2
                elif src.startswith("*/", j):
                    depth -= 1
                    j += 2
                else:
                    j += 1
            out.append("\n" * src.count("\n", i, j))
            i = j
        elif c == "r" and re.match(r'r#*"', src[i:i + 40]) and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'r(#*)"', src[i:])
            end = '"' + m.group(1)
            j = src.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j + 1
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", src[i:i + 4]) or (c == "'" and re.match(r"'\\u\{[0-9a-fA-F]+\}'", src[i:i + 12])):
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", src[i:])
            out.append("' '")
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def module_of(rel):
    """`a/b/mod.rs` -> ('a','b'); `a/b.rs` -> ('a','b'); `lib.rs` -> ()."""
    parts = rel[:-3].split("/")
    if parts[-1] in ("mod", "lib"):
        parts = parts[:-1]
    return tuple(parts)


def use_paths(text):
    """Yields (line, path) for every flattened `use` leaf and every `crate::`/`super::` path."""
    for m in re.finditer(r"\buse\s+([^;]*);", text):
        line = text.count("\n", 0, m.start()) + 1
        for p in flatten(re.sub(r"\s+", "", m.group(1)), ""):
            if p.startswith(("crate::", "super::", "self::")):
                yield line, p
    for m in re.finditer(r"(?<![\w:])((?:crate|super)(?:::\w+)+)", text):
        line = text.count("\n", 0, m.start()) + 1
        yield line, m.group(1)


def flatten(tree, prefix):
    depth, start, items = 0, 0, []
    tree += ","
    for i, c in enumerate(tree):
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == "," and depth == 0:
            items.append(tree[start:i])
            start = i + 1
    for item in items:
        if not item:
            continue
        item = re.sub(r"\bas\w+$", "", item) if "as" in item else item
        k = item.find("{")
        if k >= 0:
            inner = item[k + 1:item.rfind("}")]
            yield from flatten(inner, prefix + item[:k])
        else:
            yield prefix + item


def reexports(src, modules):
    """Names lib.rs re-exports (`pub use a::b::{X, Y}`) -> the module that defines them, so that
    `crate::X` counts as an import of that module, not of the crate root."""
    with open(os.path.join(src, "lib.rs"), encoding="utf-8") as f:
        text = strip(f.read())
    names = {}
    for m in re.finditer(r"\bpub\s+use\s+([^;]*);", text):
        for p in flatten(re.sub(r"\s+", "", m.group(1)), ""):
            p = re.sub(r"as(\w+)$", "", p) if False else p
            segs = tuple(p.split("::"))
            name = segs[-1]
            if name == "self":
                segs, name = segs[:-1], segs[-2]
            for k in range(len(segs), 0, -1):
                if segs[:k] in modules:
                    names[name] = segs[:k]
                    break
    return names


REEXPORTS = {}


def resolve(path, here, modules, is_mod_file):
    segs = path.split("::")
    if segs[0] == "crate":
        base, segs = (), segs[1:]
        if segs and segs[0] in REEXPORTS:
            return REEXPORTS[segs[0]]
    elif segs[0] in ("super", "self"):
        base = here if is_mod_file else here[:-1]  # the module `self` is
        base = here
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
    else:
        return None
    best = None
    for k in range(len(segs) + 1):
        cand = base + tuple(segs[:k])
        if cand in modules:
            best = cand
    return best


def main():
    args = sys.argv[1:]
    src = "engine/src"
    dot = None
    show_edges = False
    while args:
        a = args.pop(0)
        if a == "--dot":
            dot = args.pop(0)
        elif a == "--edges":
            show_edges = True
        else:
            src = a.rstrip("/")
    files = {}
    for root, _, names in os.walk(src):
        for name in names:
            if name.endswith(".rs"):
                rel = os.path.relpath(os.path.join(root, name), src)
                files[module_of(rel)] = rel
    modules = set(files)
    REEXPORTS.update(reexports(src, modules))
    edges = defaultdict(list)  # (from, to) -> [line]
    for mod, rel in files.items():
        with open(os.path.join(src, rel), encoding="utf-8") as f:
            text = strip(f.read())
        for line, path in use_paths(text):
            target = resolve(path, mod, modules, rel.endswith("mod.rs") or rel == "lib.rs")
            if target is None or target == mod or target == ():
                continue
            # An import of a folder's own children from its mod.rs is declaration, not use.
            if target[:len(mod)] == mod and len(mod) > 0 and rel.endswith("mod.rs"):
                continue
            if mod == ():
                continue  # lib.rs re-exports everything
            edges[(mod, target)].append(line)
    folder = lambda m: m[0]
    layer = {name: i for i, name in enumerate(LAYERS)}

    # Strongly connected components (Tarjan) over files.
    graph = defaultdict(set)
    for (a, b) in edges:
        graph[a].add(b)
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]

    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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
            sccs.append(comp)

    for v in sorted(modules):
        if v not in index and v != ():
            visit(v)
    name = lambda m: "::".join(m)
    crossing = 0
    cycles = [c for c in sccs if len(c) > 1]
    print(f"{len(files)} files, {len(edges)} imports between files, {len(cycles)} file cycles")
    for c in sorted(cycles, key=len, reverse=True):
        folders = sorted({folder(m) for m in c})
        cross = len(folders) > 1
        crossing += cross
        print(f"  cycle of {len(c)}{' (crosses folders: ' + ', '.join(folders) + ')' if cross else ' (inside ' + folders[0] + '/)'}: "
              + ", ".join(sorted(name(m) for m in c)))
    against = []
    if LAYERS:
        for (a, b), lines in sorted(edges.items()):
            fa, fb = folder(a), folder(b)
            if fa != fb and fa in layer and fb in layer and layer[fb] > layer[fa]:
                against.append((a, b, lines))
        unknown = sorted({folder(m) for m in modules if m and folder(m) not in layer})
        if unknown:
            print("folders missing from LAYERS:", ", ".join(unknown))
        print(f"{len(against)} imports against the layering ({' < '.join(LAYERS)}):")
        for a, b, lines in against:
            print(f"  {rel_of(files, a)}:{lines[0]} -> {name(b)}")
    if show_edges:
        for (a, b), lines in sorted(edges.items()):
            print(f"  {name(a)} -> {name(b)}")
    if dot:
        with open(dot, "w") as f:
            f.write("digraph engine {\n")
            for (a, b) in sorted(edges):
                f.write(f'  "{name(a)}" -> "{name(b)}";\n')
            f.write("}\n")
    # Folders: a mod.rs re-export hides which file an item comes from, so cycles between folders
    # are looked for on the folder graph too.
    fgraph = defaultdict(set)
    for (a, b) in edges:
        if folder(a) != folder(b):
            fgraph[folder(a)].add(folder(b))
    index.clear(), low.clear(), stack.clear(), on.clear()
    before = len(sccs)
    graph.clear()
    graph.update(fgraph)
    for v in sorted(fgraph):
        if v not in index:
            visit(v)
    folder_cycles = [c for c in sccs[before:] if len(c) > 1]
    for c in folder_cycles:
        crossing += 1
        print("  folder cycle: " + ", ".join(sorted(c)))
        for a in sorted(c):
            for (x, y), lines in sorted(edges.items()):
                against_layers = not LAYERS or layer.get(folder(y), -1) > layer.get(a, -1)
                if folder(x) == a and folder(y) in c and folder(y) != a and against_layers:
                    print(f"    {rel_of(files, x)}:{lines[0]} -> {name(y)}")
    print(f"{crossing} cycles cross folders")
    return 1 if crossing or against else 0


def rel_of(files, m):
    return files[m]


if __name__ == "__main__":
    sys.exit(main())

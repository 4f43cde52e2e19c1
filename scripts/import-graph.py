#!/usr/bin/env python3
"""The import graph of every crate of the workspace, by file and by folder (issue 37, issue 48
item 2; docs/design.md "The engine's rooms" and "Layers of the other crates").

Usage: python3 scripts/import-graph.py [SRC [--layers L]] [--edges] [--dot FILE]

Without SRC it checks every crate: the facade (`src`, and its binary `src/bin/pipetrain` as a
crate of its own) and each workspace member of Cargo.toml (`MEMBER/src`); a member missing from
CRATES below fails. With SRC it checks that tree alone, under CRATES[SRC] or `--layers`
(folders lowest first, comma-separated; `a+b` puts two folders in one layer).

Reads every `.rs` file under a crate's source folder, resolves each `crate::...`, `super::...`
and `self::...` path written in it (in `use` trees, grouped, renamed or not, and in code) to the
file that defines the module it names, and prints:
- the cycles between files (strongly connected components of more than one file), each marked
  `crosses layers` when its files sit in more than one layer;
- the folder graph's cycles across layers (there must be none);
- every import against the layering: an import from a folder to a folder of a higher layer, with
  its file and line;
- every folder (or top-level file) that no layer lists.
Exits 1 when a cycle crosses layers, an import runs against the layering, a folder is in no
layer or a workspace member has no layers, else 0 (CI runs it, and its self-test,
scripts/test-import-graph.py). Comments and string literals are skipped; `crate::X` for a name
the crate root re-exports counts as an import of the module that defines X.
"""
import os
import re
import sys
from collections import defaultdict

# Each crate's layers, lowest first: a folder may import its own layer and those below it. A
# top-level file (error.rs, ids.rs, ...) is a folder of its own name; the crate root (lib.rs,
# main.rs) only declares and re-exports. Folders joined by `+` share a layer: they import each
# other today (a cycle the check tolerates inside that layer only, listed in docs/design.md so
# that it is seen). The engine's are designed (docs/design.md "The engine's rooms"); the others
# were read off each crate's folder graph when the check was extended to them (issue 48): a new
# folder must be placed by whoever adds it.
CRATES = {
    "engine/src": ["ids", "precision", "error", "world", "output", "adapter", "device", "model", "comm",
                   "skips", "optim", "worker", "checkpoint", "runtime"],
    "schedules/src": ["remedy", "text_file", "zero", "id", "action+dataflow+error+plan+render+simulate+validate+violation",
                      "skip", "split", "lower", "overlap", "inference", "gpipe", "one_f_one_b",
                      "interleaved", "looped_bfs", "zb_h1", "interleaved_zb", "list_scheduler", "zb_v", "zb_2p",
                      "dual_pipe_v", "building_block", "v_min", "v_half", "kind",
                      "schedule", "plan_file"],
    "partitioner/src": ["cost+error+fit+partition", "cut", "optimal", "placement"],
    "tune/src": ["error", "space", "candidate", "table", "evaluate", "search"],
    "models/src": ["synthetic", "mlp", "resnet", "unet", "gpt", "llama"],
    "data/src": ["error+problem", "bytes", "position", "length", "dataset", "subset", "collate", "sampler",
                 "loader", "tensors", "text", "tokenized", "mnist", "cifar10", "burn_data", "validate", "spec"],
    "src": ["step_report", "remedy", "builder+commands+error+lr_schedule+memory+pipeline+setup+trainer",
            "learner"],
    "src/bin/pipetrain": ["style", "exit", "help", "device", "backward", "remat", "failure", "threads",
                          "args+checkpoints+data+footprint+given+guard+model+optimizer+run_failure+schedule",
                          "interrupt", "paths", "bench", "compare+plan+plan_limits", "config", "conflicts",
                          "settings", "distributed", "doctor", "eval", "export", "outcome", "progress",
                          "setup+train", "tune"],
}


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
    """`a/b/mod.rs` -> ('a','b'); `a/b.rs` -> ('a','b'); `lib.rs` or `main.rs` -> ()."""
    parts = rel[:-3].split("/")
    if parts[-1] in ("mod", "lib") or rel == "main.rs":
        parts = parts[:-1]
    return tuple(parts)


def use_paths(text):
    """Yields (line, path) for every flattened `use` leaf and every `crate::`/`super::` path."""
    for m in re.finditer(r"\buse\s+([^;]*);", text):
        line = text.count("\n", 0, m.start()) + 1
        for p in flatten(squeeze(m.group(1)), ""):
            if p.startswith(("crate::", "super::", "self::")):
                yield line, p
    for m in re.finditer(r"(?<![\w:])((?:crate|super)(?:::\w+)+)", text):
        line = text.count("\n", 0, m.start()) + 1
        yield line, m.group(1)


def squeeze(tree):
    """A use tree without its renames (`X as Y` -> `X`) and without whitespace."""
    return re.sub(r"\s+", "", re.sub(r"\s+as\s+\w+", "", tree))


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
        k = item.find("{")
        if k >= 0:
            inner = item[k + 1:item.rfind("}")]
            yield from flatten(inner, prefix + item[:k])
        else:
            yield prefix + item


def reexports(src, modules):
    """Names the crate root (lib.rs or main.rs) re-exports (`pub use a::b::{X, Y}`) -> the module
    that defines them, so that `crate::X` counts as an import of that module, not of the root."""
    root = os.path.join(src, "lib.rs")
    if not os.path.exists(root):
        root = os.path.join(src, "main.rs")
    if not os.path.exists(root):
        return {}
    with open(root, encoding="utf-8") as f:
        text = strip(f.read())
    names = {}
    for m in re.finditer(r"\bpub\s+use\s+([^;]*);", text):
        for p in flatten(squeeze(m.group(1)), ""):
            segs = tuple(p.split("::"))
            name = segs[-1]
            if name == "self":
                segs, name = segs[:-1], segs[-2]
            for k in range(len(segs), 0, -1):
                if segs[:k] in modules:
                    names[name] = segs[:k]
                    break
    return names


def resolve(path, here, modules, reexported):
    """The module `path`, written in module `here`, imports (the longest prefix that names a
    module of the crate), or None for a path outside the crate."""
    segs = path.split("::")
    if segs[0] == "crate":
        base, segs = (), segs[1:]
        if segs and segs[0] in reexported:
            return reexported[segs[0]]
    elif segs[0] in ("super", "self"):
        base = here  # the module `self` is: `a/b.rs` and `a/b/mod.rs` are both `a::b`
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




def read_crate(src):
    """Every module of the crate rooted at `src` -> its file (relative to `src`), and the import
    edges between them: (from, to) -> [line]. `src/bin/` holds binaries (crates of their own)
    when `src` has a lib.rs, and is left out."""
    files = {}
    has_lib = os.path.exists(os.path.join(src, "lib.rs"))
    for root, dirs, names in os.walk(src):
        if has_lib and os.path.normpath(root) == os.path.normpath(src) and "bin" in dirs:
            dirs.remove("bin")
        for name in names:
            if name.endswith(".rs"):
                rel = os.path.relpath(os.path.join(root, name), src).replace(os.sep, "/")
                files[module_of(rel)] = rel
    modules = set(files)
    reexported = reexports(src, modules)
    edges = defaultdict(list)
    for mod, rel in files.items():
        with open(os.path.join(src, rel), encoding="utf-8") as f:
            text = strip(f.read())
        for line, path in use_paths(text):
            target = resolve(path, mod, modules, reexported)
            if target is None or target == mod or target == ():
                continue
            # An import of a folder's own children from its mod.rs is declaration, not use.
            if target[:len(mod)] == mod and len(mod) > 0 and rel.endswith("mod.rs"):
                continue
            if mod == ():
                continue  # the crate root declares and re-exports everything
            edges[(mod, target)].append(line)
    return files, edges


def components(nodes, graph):
    """Strongly connected components (Tarjan), iteratively."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
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
                out.append(comp)
    return out


def check(src, layers, show_edges=False, dot=None):
    """Checks the crate at `src` against `layers`; prints the report, returns how many faults."""
    files, edges = read_crate(src)
    modules = set(files)
    folder = lambda m: m[0]
    layer = {}
    for i, entry in enumerate(layers):
        for name in entry.split("+"):
            layer[name] = i
    room = lambda f: layers[layer[f]] if f in layer else f
    name = lambda m: "::".join(m)
    faults = 0

    graph = defaultdict(set)
    for (a, b) in edges:
        graph[a].add(b)
    cycles = [c for c in components(sorted(m for m in modules if m), graph) if len(c) > 1]
    print(f"{src}: {len(files)} files, {len(edges)} imports between files, {len(cycles)} file cycles")
    for c in sorted(cycles, key=lambda c: (-len(c), sorted(c))):
        rooms = sorted({room(folder(m)) for m in c})
        cross = len(rooms) > 1
        faults += cross
        where = " (crosses layers: " + ", ".join(rooms) + ")" if cross else " (inside " + rooms[0] + ")"
        print(f"  cycle of {len(c)}{where}: " + ", ".join(sorted(name(m) for m in c)))
    unknown = sorted({folder(m) for m in modules if m and folder(m) not in layer})
    if unknown:
        faults += len(unknown)
        print(f"  {len(unknown)} folders in no layer (place each in CRATES[{src!r}]): " + ", ".join(unknown))
    against = []
    for (a, b), lines in sorted(edges.items()):
        fa, fb = folder(a), folder(b)
        if fa in layer and fb in layer and layer[fb] > layer[fa]:
            against.append((a, b, lines))
    faults += len(against)
    print(f"  {len(against)} imports against the layering ({' < '.join(layers)}):")
    for a, b, lines in against:
        print(f"    {files[a]}:{lines[0]} -> {name(b)}")
    if show_edges:
        for (a, b), lines in sorted(edges.items()):
            print(f"  {name(a)} -> {name(b)}")
    if dot:
        with open(dot, "w") as f:
            f.write("digraph crate {\n")
            for (a, b) in sorted(edges):
                f.write(f'  "{name(a)}" -> "{name(b)}";\n')
            f.write("}\n")
    # Layers: a mod.rs re-export hides which file an item comes from, so cycles are looked for
    # on the graph of layers too.
    rgraph = defaultdict(set)
    for (a, b) in edges:
        ra, rb = room(folder(a)), room(folder(b))
        if ra != rb:
            rgraph[ra].add(rb)
    for c in components(sorted(rgraph), rgraph):
        if len(c) < 2:
            continue
        faults += 1
        print("  layer cycle: " + ", ".join(sorted(c)))
        for (x, y), lines in sorted(edges.items()):
            rx, ry = room(folder(x)), room(folder(y))
            if rx in c and ry in c and rx != ry:
                print(f"    {files[x]}:{lines[0]} -> {name(y)}")
    print(f"  {faults} faults")
    return faults


def members():
    """The source folders of the workspace's crates: the facade, its binaries, each member's."""
    with open("Cargo.toml", encoding="utf-8") as f:
        text = f.read()
    listed = re.search(r"^members\s*=\s*\[([^\]]*)\]", text, re.M)
    bins = os.listdir("src/bin") if os.path.isdir("src/bin") else []
    roots = ["src"] + sorted(os.path.join("src/bin", d) for d in bins if os.path.isdir(os.path.join("src/bin", d)))
    roots += [m + "/src" for m in re.findall(r'"([^"]+)"', listed.group(1))] if listed else []
    return roots


def main():
    args = sys.argv[1:]
    src, layers, dot, show_edges = None, None, None, False
    while args:
        a = args.pop(0)
        if a == "--dot":
            dot = args.pop(0)
        elif a == "--edges":
            show_edges = True
        elif a == "--layers":
            layers = [x for x in args.pop(0).split(",") if x]
        else:
            src = a.rstrip("/")
    if src is None:
        faults = 0
        for root in members():
            if root not in CRATES:
                print(f"{root}: a crate of the workspace with no layers: add it to CRATES in {sys.argv[0]}")
                faults += 1
                continue
            faults += check(root, CRATES[root], show_edges)
        print(f"import-graph: {faults} faults in the workspace's crates")
        return 1 if faults else 0
    if layers is None:
        if src not in CRATES:
            print(f"{src}: no layers known: pass --layers")
            return 2
        layers = CRATES[src]
    return 1 if check(src, layers, show_edges, dot) else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Self-test of scripts/import-graph.py (issue 48 item 2): a check that cannot fail proves
nothing. Runs it on scratch crates: a clean one (imports down the layers, a cycle inside one
folder and one inside a joined layer, layer names in comments and strings) must pass; each
planted violation alone (an import up the layers written as a plain, grouped, renamed,
multi-line, `super::` or in-code path, or through a name the root re-exports; a cycle across
layers; a folder in no layer) must exit 1 and be named with its file and line or its folder; the
real crates must pass as they are, and the engine fail with one import injected; run without
arguments it must cover every crate of the workspace and fail on a member it has no layers for.

Usage: python3 scripts/test-import-graph.py (from anywhere; CI runs it after the check).
"""
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "import-graph.py")
LAYERS = "ids,low,high"
failures = []
cases = 0


def run(args, cwd=ROOT):
    p = subprocess.run([sys.executable, SCRIPT] + args, cwd=cwd, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def clean_crate(src):
    """A crate whose imports all go down the layers ids < low < high."""
    write(f"{src}/lib.rs", "//! `crate::high` in docs is no import.\nmod ids;\nmod low;\nmod high;\npub use low::a::Thing;\n")
    write(f"{src}/ids.rs", "pub struct Id;\n")
    write(f"{src}/low/mod.rs", "pub mod a;\npub(crate) use a::Thing;\n")
    write(f"{src}/low/a.rs", "\n".join([
        "use crate::ids::Id;",
        "// use crate::high::b::Thing; (a comment)",
        "/* crate::high::c in a block comment */",
        "const S: &str = \"crate::high::b in a string\";",
        "const R: &str = r#\"crate::high::b in a raw string\"#;",
        "pub struct Thing(Id);",
        "",
    ]))
    write(f"{src}/high/mod.rs", "pub mod b;\npub mod c;\nuse crate::low::Thing;\n")
    # b and c import each other: a cycle inside one folder is allowed.
    write(f"{src}/high/b.rs", "use super::c::C;\nuse crate::{ids::Id, low::a::Thing};\npub struct B;\n")
    write(f"{src}/high/c.rs", "use super::b::B;\npub struct C;\n")


def expect(name, args, rc, needles, cwd=ROOT):
    global cases
    cases += 1
    got, out = run(args, cwd)
    missing = [n for n in needles if n not in out]
    if got != rc or missing:
        failures.append(f"{name}: expected exit {rc} naming {needles}, got exit {got}:\n{out}")
    else:
        print(f"ok   {name:32} {needles[0] if needles else ''}")


def planted(tmp, name, path, text, needle, extra=None, layers=LAYERS):
    """A clean crate with `text` appended to `path` (and `extra` files) must fail naming
    `needle`."""
    src = os.path.join(tmp, name, "src")
    clean_crate(src)
    with open(os.path.join(src, path), encoding="utf-8") as f:
        before = f.read()
    write(os.path.join(src, path), before + text)
    for p, t in (extra or {}).items():
        write(os.path.join(src, p), t)
    expect(name, [src, "--layers", layers], 1, [needle])


def main():
    tmp = tempfile.mkdtemp(prefix="import-graph-")
    try:
        clean = os.path.join(tmp, "clean", "src")
        clean_crate(clean)
        expect("clean", [clean, "--layers", LAYERS], 0, ["0 faults"])
        # low/a.rs has 6 lines: a planted line lands on line 7 (or later, as noted).
        planted(tmp, "plain", "low/a.rs", "use crate::high::b::B;\n", "a.rs:7 -> high::b")
        planted(tmp, "grouped", "low/a.rs", "use crate::{ids::Id as I, high::{b::B, c}};\n", "a.rs:7 -> high::b")
        planted(tmp, "renamed", "low/a.rs", "use crate::{ids::Id, high as h};\n", "a.rs:7 -> high")
        planted(tmp, "multi-line", "low/a.rs", "use crate::{\n    ids::Id,\n    high::c::C,\n};\n", "a.rs:7 -> high::c")
        planted(tmp, "super", "low/a.rs", "use super::super::high::c::C;\n", "a.rs:7 -> high::c")
        planted(tmp, "in-code", "low/a.rs", "fn f() -> crate::high::b::B {\n    crate::high::b::B\n}\n", "a.rs:7 -> high::b")
        planted(tmp, "re-exported", "low/a.rs", "use crate::C;\n", "a.rs:7 -> high::c",
                {"lib.rs": "mod ids;\nmod low;\nmod high;\npub use high::c::C;\n"})
        planted(tmp, "after-a-string", "low/a.rs", "const T: &str = \"a \\\"quoted\\\" crate::low\"; use crate::high::b::B;\n",
                "a.rs:7 -> high::b")
        # An import up the layers that closes a cycle: named as both.
        planted(tmp, "cycle-across-layers", "ids.rs", "use crate::low::a::Thing;\n", "crosses layers: ids, low")
        # The same cycle inside a joined layer passes.
        joined = os.path.join(tmp, "joined", "src")
        clean_crate(joined)
        with open(os.path.join(joined, "ids.rs"), "a", encoding="utf-8") as f:
            f.write("use crate::low::a::Thing;\n")
        expect("cycle-inside-a-joined-layer", [joined, "--layers", "ids+low,high"], 0, ["inside ids+low"])
        # A folder no layer lists fails, named; so does a top-level file.
        planted(tmp, "unlisted-folder", "lib.rs", "mod extra;\n", "folders in no layer", {"extra/mod.rs": "pub struct E;\n"})
        planted(tmp, "unlisted-file", "lib.rs", "mod extra;\n", "in no layer (place each in CRATES['", {"extra.rs": "pub struct E;\n"})

        # The real crates pass; the engine fails with one import up the layers injected.
        expect("workspace", [], 0, ["import-graph: 0 faults"] + [f"{c}: " for c in (
            "src", "src/bin/pipetrain", "schedules/src", "partitioner/src", "tune/src", "engine/src", "models/src", "data/src")])
        engine = os.path.join(tmp, "engine", "src")
        shutil.copytree(os.path.join(ROOT, "engine", "src"), engine)
        expect("engine-as-is", [engine, "--layers", ",".join(engine_layers())], 0, ["0 faults"])
        tie = os.path.join(engine, "optim", "tie.rs")
        with open(tie, encoding="utf-8") as f:
            lines = f.read().split("\n")
        lines.insert(1, "use crate::runtime::Runtime;")
        write(tie, "\n".join(lines))
        expect("engine-with-injected-import", [engine, "--layers", ",".join(engine_layers())], 1,
               ["optim/tie.rs:2 -> runtime"])
        # A workspace member with no layers fails the default run.
        ws = os.path.join(tmp, "ws")
        write(f"{ws}/Cargo.toml", '[workspace]\nmembers = ["newcrate"]\n')
        write(f"{ws}/src/lib.rs", "pub fn f() {}\n")
        write(f"{ws}/newcrate/src/lib.rs", "pub fn g() {}\n")
        expect("member-without-layers", [], 1, ["newcrate/src: a crate of the workspace with no layers"], cwd=ws)
    finally:
        shutil.rmtree(tmp)
    if failures:
        for f in failures:
            print("FAIL: " + f, file=sys.stderr)
        print(f"test-import-graph: {len(failures)} of {cases} cases failed", file=sys.stderr)
        return 1
    print(f"test-import-graph: ok, the check passes the clean crate and the workspace, and fails all {cases - 3} violations")
    return 0


def engine_layers():
    """The engine's layers, as the script declares them."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("import_graph", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CRATES["engine/src"]


if __name__ == "__main__":
    sys.exit(main())

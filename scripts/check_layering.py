#!/usr/bin/env python3
"""Checks that every folder includes only the folders below it (DESIGN.md and README.md, "Layout").

- A project include ("folder/file.hpp") must name the folder itself or one it may use (USES).
- diloco/ is the C++ standard library only: its angle includes must be standard headers (no '/',
  no '.h'), so neither CAF, torch, Cap'n Proto nor any other library reaches it. The one exception
  is nlohmann-json, the encoding of its values (diloco/version_manifest.hpp).

Prints every violation with its file and line, and exits 1 when there is any; 0 otherwise.
Usage: scripts/check_layering.py [SOURCE_DIR] | --self-test
"""
import pathlib
import re
import sys

# Each folder with the folders it may include, lowest first. A folder always may include itself.
USES = {
    "common": set(),
    "diloco": {"common"},
    "messages": {"common"},
    "storage": {"common", "messages"},
    "training": {"common", "diloco"},
    "net": {"common"},
    "sim": {"common", "diloco"},
    "actors": {"common", "diloco", "messages", "net", "storage", "training"},
    "remote": {"common", "diloco", "messages", "net", "storage", "training", "actors"},
    "run": {"common", "diloco", "messages", "net", "storage", "training", "actors", "remote"},
    "apps": {"common", "diloco", "messages", "net", "storage", "training", "sim", "actors", "remote", "run"},
}
STD_ONLY = {"diloco"}
STD_ONLY_EXCEPT = {"nlohmann/json.hpp"}  # header-only: the encoding of diloco's values
SOURCES = (".hpp", ".cpp", ".h", ".cc")
PROJECT_INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/[^"]+"')
ANGLE_INCLUDE = re.compile(r"^\s*#\s*include\s+<([^>]+)>")


def violations(root):
    found = []
    for folder, allowed in USES.items():
        base = root / folder
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            if path.suffix not in SOURCES:
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                where = f"{path.relative_to(root)}:{number}"
                match = PROJECT_INCLUDE.match(line)
                if match:
                    target = match.group(1)
                    if target != folder and target in USES and target not in allowed:
                        found.append(f"{where}: {folder}/ includes {target}/ ({line.strip()}); "
                                     f"{folder}/ may use {', '.join(sorted(allowed)) or 'nothing'}")
                match = ANGLE_INCLUDE.match(line)
                if match and folder in STD_ONLY:
                    header = match.group(1)
                    if ("/" in header or header.endswith(".h")) and header not in STD_ONLY_EXCEPT:
                        found.append(f"{where}: {folder}/ is the standard library only, not <{header}>")
    return found


def self_test():
    """The checker finds what it must: run on a small tree with one violation of each kind."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        root = pathlib.Path(d)
        for folder, text in {
            "diloco": '#include <vector>\n#include "common/error.hpp"\n#include <caf/actor.hpp>\n#include "actors/x.hpp"\n',
            "actors": '#include "diloco/mode.hpp"\n#include "remote/edge.hpp"\n',
            "remote": '#include "actors/wire.hpp"\n',
        }.items():
            (root / folder).mkdir()
            (root / folder / "a.hpp").write_text(text)
        found = violations(root)
        expected = ["diloco/a.hpp:3", "diloco/a.hpp:4", "actors/a.hpp:2"]
        ok = [f.split(": ")[0] for f in found] == expected
        print(f"layering self-test: {'ok' if ok else 'FAILED'}: {found}")
        return 0 if ok else 1


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    found = violations(root)
    for line in found:
        print(line)
    checked = sum(1 for f in USES if (root / f).is_dir())
    print(f"layering: {checked} folders checked, {len(found)} violation(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Size limits of the source (issue 52): no file over 800 lines, no class over 500, no function
over 120, in src/, kernels/, cli/ and include/ (tests and generated tables aside).

What is over a limit today is listed in .ci/sizes_known.txt with its size: the debt, which may
shrink but not grow. The check fails for a new offender, or a known one that grew; one that
shrank below its listed size is reported so the list can be tightened (--update rewrites it).

  python3 .ci/sizes.py            # check
  python3 .ci/sizes.py --update   # rewrite .ci/sizes_known.txt from the tree as it is

Functions and classes are found by a brace-matching scan, good enough for tec's style (a
definition's opening brace ends its signature line); a lambda or a struct inside a function
counts toward that function.
"""
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
FOLDERS = ["src", "kernels", "cli", "include"]
EXTENSIONS = (".cpp", ".h", ".cu", ".cuh")
LIMITS = {"file": 800, "class": 500, "function": 120}
KNOWN = os.path.join(ROOT, ".ci", "sizes_known.txt")

CONTROL = re.compile(r"^\s*(if|else|for|while|switch|do|try|catch|namespace|extern|return)\b")
CLASS = re.compile(r"^\s*(?:template\s*<[^>]*>\s*)?(class|struct)\s+(\w+)[^;(]*\{\s*(//.*)?$")
FUNCTION_END = re.compile(r"\)\s*(const)?\s*(noexcept)?\s*(override)?\s*(->\s*[\w:<>,\s*&]+)?\s*\{\s*(//.*)?$")


def strip_strings(line):
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])*'", "''", line)
    return line.split("//")[0] if "//" in line and not line.strip().startswith("#") else line


def measure(path):
    """(kind, name, lines) for every class and function over its limit, and the file."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    found = []
    if len(lines) > LIMITS["file"]:
        found.append(("file", "", len(lines)))
    depth = 0
    open_blocks = []  # (kind, name, start line, depth at open)
    signature = ""
    for number, raw in enumerate(lines, 1):
        line = strip_strings(raw)
        if line.lstrip().startswith("#"):
            continue
        signature = (signature + " " + line.strip()) if signature and not line.strip().endswith(";") else line.strip()
        opens, closes = line.count("{"), line.count("}")
        if opens > closes and line.rstrip().endswith("{"):
            kind = name = None
            if (m := CLASS.match(line)):
                kind, name = "class", m.group(2)
            elif not CONTROL.match(line) and "=" not in line.split("(")[0] and FUNCTION_END.search(signature) and "(" in signature:
                head = signature.split("(")[0].split()
                if head and re.match(r"^[\w:~<>*&]+$", head[-1]) and head[-1] not in ("if", "for", "while", "switch"):
                    kind, name = "function", head[-1]
            if kind and not any(b[0] == "function" for b in open_blocks):
                open_blocks.append((kind, name, number, depth))
        depth += opens - closes
        while open_blocks and depth <= open_blocks[-1][3]:
            kind, name, start, _ = open_blocks.pop()
            size = number - start + 1
            if size > LIMITS[kind]:
                found.append((kind, name, size))
        if line.strip().endswith((";", "{", "}")) or not line.strip():
            signature = ""
    return found


def scan():
    result = {}
    for folder in FOLDERS:
        for base, _, files in os.walk(os.path.join(ROOT, folder)):
            for f in sorted(files):
                if not f.endswith(EXTENSIONS):
                    continue
                path = os.path.join(base, f)
                rel = os.path.relpath(path, ROOT)
                for kind, name, size in measure(path):
                    result[f"{rel} {kind} {name}".rstrip()] = size
    return result


def main():
    current = scan()
    if "--update" in sys.argv:
        with open(KNOWN, "w") as f:
            f.write("# Over issue 52's size limits (file 800 lines, class 500, function 120): the debt, which may\n"
                    "# shrink but not grow. .ci/sizes.py checks it; --update rewrites this list.\n")
            for key in sorted(current):
                f.write(f"{current[key]} {key}\n")
        print(f"sizes: {len(current)} over the limits, written to {os.path.relpath(KNOWN, ROOT)}")
        return 0
    known = {}
    with open(KNOWN) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            size, key = line.strip().split(" ", 1)
            known[key] = int(size)
    failures = []
    for key, size in sorted(current.items()):
        kind = key.split(" ")[1]
        if key not in known:
            failures.append(f"{key}: {size} lines, over the limit of {LIMITS[kind]}")
        elif size > known[key]:
            failures.append(f"{key}: {size} lines, grown from {known[key]} (limit {LIMITS[kind]})")
    for key, size in sorted(known.items()):
        if current.get(key, 0) < size:
            print(f"sizes: {key} is {current.get(key, 'within the limit')} now, listed at {size}: tighten with --update")
    for failure in failures:
        print("sizes: " + failure, file=sys.stderr)
    print(f"sizes: {len(current)} over the limits, {len(failures)} new or grown")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

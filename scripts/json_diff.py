#!/usr/bin/env python3
"""Compares two golden folders file by file; prints, for each file that differs, every
JSON path whose value moved (old -> new), the two digests for *.sha256 files, or the changed
lines of a text file.
Byte-identical files pass silently. Exit 1 when anything differs."""
import difflib
import json
import os
import sys


def walk(old, new, path, out):
    if type(old) is not type(new):
        out.append(f"{path}: {json.dumps(old)} -> {json.dumps(new)}")
    elif isinstance(old, dict):
        for k in sorted(set(old) | set(new)):
            p = f"{path}.{k}"
            if k not in new:
                out.append(f"{p}: removed (was {json.dumps(old[k])[:80]})")
            elif k not in old:
                out.append(f"{p}: added {json.dumps(new[k])[:80]}")
            else:
                walk(old[k], new[k], p, out)
    elif isinstance(old, list):
        if len(old) != len(new):
            out.append(f"{path}: length {len(old)} -> {len(new)}")
        for i, (a, b) in enumerate(zip(old, new)):
            walk(a, b, f"{path}[{i}]", out)
    elif old != new:
        out.append(f"{path}: {json.dumps(old)} -> {json.dumps(new)}")


def main(golden_dir, new_dir):
    name = os.path.basename(golden_dir.rstrip("/"))
    files = sorted(set(os.listdir(golden_dir)) | set(os.listdir(new_dir)))
    differs = False
    for f in files:
        a, b = os.path.join(golden_dir, f), os.path.join(new_dir, f)
        if not os.path.exists(a) or not os.path.exists(b):
            print(f"{name}/{f}: only in {'the new output' if os.path.exists(b) else 'the golden'}")
            differs = True
            continue
        old, new = open(a, "rb").read(), open(b, "rb").read()
        if old == new:
            continue
        differs = True
        if f.endswith(".sha256"):
            print(f"{name}/{f}: {old.decode().strip()} -> {new.decode().strip()}")
            continue
        if not f.endswith(".json"):  # text (a report): its changed lines
            diff = list(difflib.unified_diff(old.decode().splitlines(), new.decode().splitlines(),
                                             "golden", "new", lineterm="", n=0))
            print(f"{name}/{f}: differs")
            for line in diff[2:42]:
                print(f"  {line}")
            continue
        lines = []
        walk(json.loads(old), json.loads(new), "$", lines)
        if not lines:
            lines = ["same values, different bytes (formatting or key order)"]
        print(f"{name}/{f}: {len(lines)} difference(s)")
        for line in lines[:40]:
            print(f"  {line}")
        if len(lines) > 40:
            print(f"  ... {len(lines) - 40} more")
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))

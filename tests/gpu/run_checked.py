#!/usr/bin/env python3
"""Runs one gpu-suite program and checks gvmshim's JSON statistics after it.

    run_checked.py [--lib LIBGVMSHIM | --no-preload] [--stats PATH]
                   [--check EXPR]... [--env K=V]... [--timeout S]
                   [--needs-libcuda] -- PROGRAM [ARGS...]

--lib sets LD_PRELOAD for the program only (without it, LD_PRELOAD is
passed through from the environment; --no-preload removes it). With
--check, GVM_STATS=PATH (default: a temporary file) is set for the program
and each EXPR is evaluated on the JSON it wrote at exit, e.g.

    allocations_total >= 7
    driver_calls.cuMemAlloc_v2 <= allocations_total
    resident_bytes['1'] > 0 and migrations_d2h == 0

Names are the JSON's top-level keys (a missing one is an error); inside
nested objects (driver_calls, bytes_live, ...) a missing key reads as 0.

Exit status: the program's 77 (skip) passes through; otherwise 0 only when
the program and every check passed. The last line is "N passed, N failed"
(the program's counts plus one per check).
"""
import argparse
import ast
import ctypes
import json
import os
import re
import subprocess
import sys
import tempfile
import threading

SUMMARY = re.compile(r"^(\d+) passed, (\d+) failed\s*$")


class CheckError(Exception):
    pass


class Nested(dict):
    """A nested JSON object: missing keys read as 0."""

    def __missing__(self, key):
        return 0


def wrap(v):
    if isinstance(v, dict):
        return Nested({k: wrap(x) for k, x in v.items()})
    return v


_BINOPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
           ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a / b,
           ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}
_CMPS = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b,
         ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b,
         ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b}


def evaluate(expr, stats, seen):
    """Evaluates a small expression language over the stats; records every
    name it reads in `seen` (for the message)."""

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in stats:
                raise CheckError("no key %r in the stats (keys: %s)" % (node.id, ", ".join(sorted(stats))))
            v = stats[node.id]
            if not isinstance(v, dict):
                seen[node.id] = v
            return v
        if isinstance(node, ast.Attribute):
            base = ev(node.value)
            if not isinstance(base, dict):
                raise CheckError("%s is not an object" % ast.dump(node.value))
            owner = getattr(node.value, "id", "?")
            # The call tables leave out entry points never called.
            v = base.get(node.attr, 0) if owner.endswith("driver_calls") else base[node.attr]
            seen["%s.%s" % (owner, node.attr)] = v
            return v
        if isinstance(node, ast.Subscript):
            base = ev(node.value)
            key_node = node.slice
            if hasattr(ast, "Index") and isinstance(key_node, getattr(ast, "Index")):
                key_node = key_node.value  # Python < 3.9
            key = ev(key_node)
            if not isinstance(base, dict):
                raise CheckError("subscript of a non-object")
            v = base[str(key)]
            seen["%s[%r]" % (getattr(node.value, "id", "?"), str(key))] = v
            return v
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not ev(node.operand)
        if isinstance(node, ast.BoolOp):
            vals = [ev(v) for v in node.values]
            return all(vals) if isinstance(node.op, ast.And) else any(vals)
        if isinstance(node, ast.Compare):
            left = ev(node.left)
            for op, right_node in zip(node.ops, node.comparators):
                if type(op) not in _CMPS:
                    raise CheckError("unsupported comparison")
                right = ev(right_node)
                if not _CMPS[type(op)](left, right):
                    return False
                left = right
            return True
        raise CheckError("unsupported syntax: %s" % type(node).__name__)

    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as e:
        raise CheckError("cannot parse %r: %s" % (expr, e))
    return ev(tree)


def pump(stream, sink, lines):
    for raw in iter(stream.readline, b""):
        text = raw.decode("utf-8", "replace")
        lines.append(text)
        sink.write(text)
        sink.flush()
    stream.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", help="libgvmshim.so to preload for the program")
    ap.add_argument("--no-preload", action="store_true", help="run the program without LD_PRELOAD")
    ap.add_argument("--stats", help="where the program writes its stats JSON, the pid added to the name "
                    "(default: a temporary file)")
    ap.add_argument("--check", action="append", default=[], help="an expression over the stats JSON")
    ap.add_argument("--env", action="append", default=[], help="KEY=VALUE for the program")
    ap.add_argument("--timeout", type=float, default=600, help="seconds before the program is killed")
    ap.add_argument("--needs-libcuda", action="store_true",
                    help="skip (77) when libcuda.so.1 cannot be loaded (programs linked with -lcuda)")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd
    if not cmd:
        ap.error("no program given")

    if args.needs_libcuda:
        try:
            ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            print("SKIP: the program links libcuda, which cannot be loaded here (%s)" % e)
            print("0 passed, 0 failed")
            return 77

    env = dict(os.environ)
    if args.no_preload:
        env.pop("LD_PRELOAD", None)
    elif args.lib:
        if not os.path.exists(args.lib):
            print("FAIL: %s does not exist (build it first)" % args.lib)
            print("0 passed, 1 failed")
            return 1
        env["LD_PRELOAD"] = args.lib
    for kv in args.env:
        k, _, v = kv.partition("=")
        env[k] = v

    stats_path = None
    tmpdir = None
    if args.check:
        if args.stats:
            # One file per run: the same test run on other GPUs of the
            # machine at the same time (scripts/gpu-all --gpus) writes its own.
            base, ext = os.path.splitext(os.path.abspath(args.stats))
            stats_path = "%s.%d%s" % (base, os.getpid(), ext)
        else:
            tmpdir = tempfile.mkdtemp(prefix="gvm-stats-")
            stats_path = os.path.join(tmpdir, "stats.json")
        if os.path.exists(stats_path):
            os.unlink(stats_path)
        env["GVM_STATS"] = stats_path

    print("run: %s%s" % ("LD_PRELOAD=%s " % env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "", " ".join(cmd)))
    sys.stdout.flush()
    try:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as e:
        print("FAIL: cannot run %s: %s" % (cmd[0], e))
        print("0 passed, 1 failed")
        return 1
    lines = []
    t = threading.Thread(target=pump, args=(proc.stdout, sys.stdout, lines), daemon=True)
    t.start()
    try:
        rc = proc.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        t.join(5)
        print("FAIL: %s ran past %.0f s and was killed" % (cmd[0], args.timeout))
        print("0 passed, 1 failed")
        return 1
    t.join(30)

    if rc == 77:
        print("(skipped: the program exited 77)")
        return 77

    passed = failed = 0
    for line in lines:
        m = SUMMARY.match(line.strip())
        if m:
            passed, failed = int(m.group(1)), int(m.group(2))
    if rc != 0:
        if rc < 0:
            print("FAIL: %s was killed by signal %d" % (cmd[0], -rc))
        else:
            print("FAIL: %s exited %d" % (cmd[0], rc))
        if failed == 0:
            failed = 1

    if args.check:
        stats = None
        if not os.path.exists(stats_path):
            print("FAIL stats: %s was not written (was the program run under the shim?)" % stats_path)
            failed += len(args.check)
        else:
            try:
                with open(stats_path) as f:
                    stats = wrap(json.load(f))
            except ValueError as e:
                print("FAIL stats: %s is not valid JSON: %s" % (stats_path, e))
                failed += len(args.check)
        if stats is not None:
            for expr in args.check:
                seen = {}
                try:
                    ok = bool(evaluate(expr, stats, seen))
                    why = ", ".join("%s=%s" % kv for kv in seen.items())
                except CheckError as e:
                    ok, why = False, str(e)
                print("%s stats: %s  (%s)" % ("PASS" if ok else "FAIL", expr, why))
                if ok:
                    passed += 1
                else:
                    failed += 1
            if failed:
                print("stats file: %s" % stats_path)
    if stats_path and not failed:
        try:
            os.unlink(stats_path)
            if tmpdir:
                os.rmdir(tmpdir)
        except OSError:
            pass
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

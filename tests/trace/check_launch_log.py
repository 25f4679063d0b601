#!/usr/bin/env python3
"""GVM_LAUNCH_LOG: a read loop (launch_loop.c) run under the shim on the
simulated driver, spilling, writes a log that scripts/probe/optimal.py
reads: one record per launch and allocation, in order, the loop's period
found, and MIN's moves those of the cycle (tests/cpu/check_optimal.py).

    check_launch_log.py LIBGVMSHIM SIMCUDA_DIR LAUNCH_LOOP OPTIMAL_PY"""
import importlib.util
import os
import re
import subprocess
import sys
import tempfile

MiB = 1 << 20
N, STEPS, SLOTS = 5, 8, 3


def main():
    lib, sim, prog, optimal_py = sys.argv[1:5]
    spec = importlib.util.spec_from_file_location("optimal", optimal_py)
    optimal = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(optimal)
    failed = passed = 0

    def check(ok, what):
        nonlocal failed, passed
        print("%s %s" % ("PASS" if ok else "FAIL", what))
        passed += bool(ok)
        failed += not ok

    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "launches-%p.bin")
        env = dict(os.environ, LD_PRELOAD=lib, GVM_LAUNCH_LOG=log, GVM_SPILL="host", GVM_DEVICE_LIMIT="28M",
                   GVM_LOG="warn", GVM_CONTROL="0",
                   LD_LIBRARY_PATH=os.pathsep.join(x for x in (sim, os.environ.get("LD_LIBRARY_PATH")) if x))
        p = subprocess.run([prog, str(N), str(STEPS)], env=env, capture_output=True, text=True, timeout=120)
        check(p.returncode == 0 and "launched" in p.stdout, "the loop ran (exit %d) %s" % (p.returncode, p.stderr[-500:]))
        files = [f for f in os.listdir(tmp) if f.startswith("launches-")]
        check(len(files) == 1 and re.match(r"launches-[0-9]+\.bin$", files[0]),
              "one log, named with the process id: %s" % files)
        if not files:
            return 1
        launches, sizes, info = optimal.read_log(os.path.join(tmp, files[0]))
        check(len(launches) == N * STEPS + 1, "%d launches logged (want %d)" % (len(launches), N * STEPS + 1))
        check(launches[-1] == (), "the launch on no allocation is logged with none")
        body = launches[:-1]
        check(all(len(l) == 1 for l in body), "each loop launch reached one allocation")
        check(len(set(body)) == N and body[:N] == body[N:2 * N], "the loop's %d allocations in order" % N)
        check(all(sizes[l[0]] == 8 * MiB for l in body), "sizes are the allocations' mapped bytes")
        check(info["dropped"] == 0 and info["partial"] == 0, "nothing dropped, nothing scanned in part: %s" % info)
        period, _ = optimal.find_period(body)
        check(period == N, "the period found is %d launches (want %d)" % (period, N))
        link = {"h2d": 1.0, "d2h": 1.0}
        r = optimal.from_log(os.path.join(tmp, files[0]), SLOTS * 8 * MiB, 1.0, link)
        check(r["period"] == N and r["launches"] == N, "from the log: a step of %d launches" % r["launches"])
        want = N * (N - SLOTS) / (N - 1.0) * 8 * MiB
        check(abs(r["min_in_bytes"] - want) < 1, "MIN brings in %.0f bytes per step (want %.0f)"
              % (r["min_in_bytes"], want))
        check(r["lru_in_bytes"] == N * 8 * MiB, "LRU brings in every allocation")
        # Three threads launching at once: every launch logged, each with its own number.
        many = os.path.join(tmp, "threads.bin")
        p = subprocess.run([prog, str(N), str(STEPS), "3"], env=dict(env, GVM_LAUNCH_LOG=many), capture_output=True,
                           text=True, timeout=120)
        check(p.returncode == 0, "three threads ran the loop (exit %d) %s" % (p.returncode, p.stderr[-300:]))
        if p.returncode == 0:
            launches, _, info = optimal.read_log(many)
            check(len(launches) == 3 * N * STEPS + 1 and info["records"] == 3 * N * STEPS + 1
                  and info["dropped"] == 0, "three threads: %d launches, %s" % (len(launches), info))
        # Launches not hooked (track_launches off): said, nothing written.
        quiet = os.path.join(tmp, "off.bin")
        off = dict(env, GVM_LAUNCH_LOG=quiet, GVM_TRACK_LAUNCHES="off")
        p = subprocess.run([prog, str(N), "2"], env=off, capture_output=True, text=True, timeout=120)
        check(p.returncode == 0 and not os.path.exists(quiet) and "launches are not scanned" in p.stderr,
              "launches not hooked: a warning, no log (%s)" % p.stderr.strip()[-200:])
        # A symlink at the path is never followed: a warning, the program unharmed.
        target, link_path = os.path.join(tmp, "target"), os.path.join(tmp, "link.bin")
        open(target, "w").close()
        os.symlink(target, link_path)
        p = subprocess.run([prog, str(N), "2"], env=dict(env, GVM_LAUNCH_LOG=link_path), capture_output=True,
                           text=True, timeout=120)
        check(p.returncode == 0 and "cannot write the launch log" in p.stderr and os.path.getsize(target) == 0,
              "a symlink at the path: a warning, nothing written through it (%s)" % p.stderr.strip()[-200:])
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

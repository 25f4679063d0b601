#!/usr/bin/env python3
"""scripts/probe/optimal.py, the spill benchmarks' yardstick, on synthetic
steps with answers worked out by hand (the cyclic read loop: MIN faults on
(N-C)/(N-1) of the references) and against an exhaustive search (the
fewest fetches any eviction order achieves, on small Adam-like steps).

    check_optimal.py OPTIMAL_PY"""
import importlib.util
import itertools
import os
import sys
import tempfile

MiB = 1 << 20
passed = failed = 0


def check(ok, what):
    global passed, failed
    print("%s %s" % ("PASS" if ok else "FAIL", what))
    passed += bool(ok)
    failed += not ok


def near(a, b):
    return abs(a - b) <= 1e-9 * max(1.0, abs(b))


def reads(names):
    return [[(k, False) for k in launch] for launch in names]


def writes(names):
    return [[(k, True) for k in launch] for launch in names]


def fewest_fetches(seq, sizes, cap):
    """Every eviction order: the least bytes brought in over seq (tiny
    sequences only). Evicting only when room is needed loses nothing."""
    best = {frozenset(): 0}
    for launch in seq:
        keys = {k for k, _ in launch}
        nxt = {}
        for held, cost in best.items():
            need = keys - held
            add = sum(sizes[k] for k in need)
            others = sorted(held - keys)
            for r in range(len(others) + 1):
                for out in itertools.combinations(others, r):
                    kept = held - set(out)
                    if sum(sizes[k] for k in kept) + add > cap:
                        continue
                    state = frozenset(kept | keys)
                    if cost + add < nxt.get(state, float("inf")):
                        nxt[state] = cost + add
        best = nxt
    return min(best.values())


def main():
    spec = importlib.util.spec_from_file_location("optimal", sys.argv[1])
    o = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(o)

    # The read loop: N tensors read in turn, room for C. MIN: N(N-C)/(N-1) a pass
    # (N=3, C=2: 1.5; its faults fall every C-1 = 1 hits); LRU: all N.
    for n, c in ((3, 2), (4, 3), (5, 3), (4, 2), (7, 4), (8, 5), (48, 32)):
        step = reads([[i] for i in range(n)])
        sizes = {i: 128 * MiB for i in range(n)}
        b_in, b_out = o.simulate(step, sizes, c * 128 * MiB, "min")
        want = n * (n - c) / (n - 1.0) * 128 * MiB
        check(near(b_in, want), "cycle of %d in room for %d: MIN brings in %.3f tensors a pass (want %.3f)"
              % (n, c, b_in / (128 * MiB), want / (128 * MiB)))
        check(b_out == 0, "cycle of %d, read only: nothing written back" % n)
        l_in, _ = o.simulate(step, sizes, c * 128 * MiB, "lru")
        check(l_in == n * 128 * MiB, "cycle of %d in room for %d: LRU brings in all %d" % (n, c, n))
        w_in, w_out = o.simulate(writes([[i] for i in range(n)]), sizes, c * 128 * MiB, "min")
        check(near(w_in, want) and near(w_out, want), "cycle of %d, every eviction written back: out = in" % n)

    # Reading in place (a peer over NVLink): C tensors stay, N - C are read
    # where they are each pass, the once-a-step bound; written ones go back too.
    for n, c in ((3, 2), (5, 3), (12, 8)):
        sizes = {i: 1 for i in range(n)}
        b_in, b_out = o.simulate(reads([[i] for i in range(n)]), sizes, c, "min", bypass=True)
        check(b_in == n - c and b_out == 0, "cycle of %d in room for %d read in place: %s in a pass (want %d)"
              % (n, c, b_in, n - c))
        b_in, b_out = o.simulate(writes([[i] for i in range(n)]), sizes, c, "min", bypass=True)
        check(b_in == n - c and b_out == n - c, "the same written: %s in, %s out (want %d each)" % (b_in, b_out, n - c))
    r = o.yardstick(reads([["A", "B"]]), {"A": 3, "B": 3}, 4, 1.0, {"h2d": 1, "d2h": 1}, bypass=True)
    check(r["min_in_bytes"] == 3, "read in place, a launch larger than the limit runs: one region stays (%s)"
          % r["min_in_bytes"])

    # Fits: nothing moves, the step is the native one.
    r = o.yardstick(reads([[0], [1]]), {0: MiB, 1: MiB}, 2 * MiB, 5.0, {"h2d": 50, "d2h": 50})
    check(r["min_in_bytes"] == 0 and r["optimal_ms"] == 5.0, "a step that fits: optimal = native")

    # Two sweeps a step over 3 tensors in room for 2 (the "bound" counts 1 a
    # step; a second sweep makes it the cycle twice): MIN 2 x 1.5 = 3 a step.
    two = reads([[0], [1], [2], [0], [1], [2]])
    b_in, _ = o.simulate(two, {0: 1, 1: 1, 2: 1}, 2, "min")
    check(near(b_in, 3.0), "two sweeps of 3 in room for 2: MIN brings in 3 a step (got %.3f)" % b_in)

    # Adam-like (scripts/probe/adam-belady.py's foreach order, shrunk to two
    # weights): forward, backward with a gradient temporary, then one pass per
    # operation over the moments. MIN over 4 steps equals the exhaustive optimum.
    adam = [["W0"], ["W1"], ["T", "G1"], ["T", "G0"], ["m0", "G0"], ["m1", "G1"], ["v0"], ["v1"],
            ["v0", "G0"], ["v1", "G1"], ["W0", "m0", "v0"], ["W1", "m1", "v1"]]
    sizes = {k: 1 for l in adam for k in l}
    for cap in (4, 5, 6):
        seq = reads(adam) * 4
        total = o.simulate_finite(seq, sizes, cap, "min")[0]
        check(total == fewest_fetches(seq, sizes, cap),
              "Adam-like step x4 in room for %d: MIN's %d fetches are the fewest possible" % (cap, total))
    d_in, _ = o.simulate(reads(adam), sizes, 5, "min")
    check(d_in == 7, "Adam-like step of 9 tensors in room for 5: MIN brings in 7 a step, where the once-a-step "
          "bound counts 4 (got %.2f)" % d_in)

    # The earlier model of the benchmark's training step (scripts/probe/
    # adam-belady.py, one tensor a launch): the same counts.
    spec = importlib.util.spec_from_file_location("adam_belady", os.path.join(os.path.dirname(sys.argv[1]),
                                                                              "adam-belady.py"))
    ab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ab)
    for name, order in (("fused", ab.fused), ("foreach", ab.foreach)):
        seq = order()
        for slots in (27, 30):
            want = (ab.misses(seq, slots, 13) - ab.misses(seq, slots, 3)) / 10.0
            fin = [[(k, False)] for k in seq]
            got = (o.simulate_finite(fin * 13, {k: 1 for k in seq}, slots)[0] -
                   o.simulate_finite(fin * 3, {k: 1 for k in seq}, slots)[0]) / 10.0
            steady = o.simulate(fin, {k: 1 for k in seq}, slots)[0]
            # its 10 steps are not a whole cycle of MIN's steady state
            check(abs(steady - want) <= 0.2, "adam-belady.py's %s step in %d slots, the exact steady state: %.2f "
                  "(its 10-step average: %.1f)" % (name, slots, steady, want))
            check(near(got, want), "adam-belady.py's %s step in %d slots: %.1f tensors a step, as it counts (%.1f)"
                  % (name, slots, got, want))

    # Unequal sizes and launches reaching several regions: room is bytes.
    pair = reads([["A", "B"], ["C", "D"]])
    b_in, _ = o.simulate(pair, {"A": 2, "B": 2, "C": 2, "D": 2}, 4, "min")
    check(b_in == 8, "two launches of two regions each, room for one launch: everything moves (%s)" % b_in)
    try:
        o.yardstick(pair, {"A": 3, "B": 3, "C": 1, "D": 1}, 4, 1.0, {"h2d": 1, "d2h": 1})
        check(False, "a launch larger than the limit is refused")
    except ValueError as e:
        check("more than the limit" in str(e), "a launch larger than the limit is refused: %s" % e)

    # Time: duplex, the rest at the one-way rate; simplex adds up.
    g = 1e9
    check(near(o.copy_seconds(g, g, {"h2d": 50, "d2h": 50}), 0.02), "1 GB each way, duplex at 50 GB/s: 20 ms")
    check(near(o.copy_seconds(g, g, {"h2d": 50, "d2h": 50, "simplex": True}), 0.04), "simplex: 40 ms")
    check(near(o.copy_seconds(g, g / 2, {"h2d": 50, "d2h": 50, "h2d_duplex": 40, "d2h_duplex": 40}), 0.0225),
          "1 GB in, 0.5 GB out, 40 GB/s each while both run: 12.5 ms together + 10 ms alone")
    step = writes([[i] for i in range(3)])
    r = o.yardstick(step, {i: g for i in range(3)}, 2 * g, 10.0, {"h2d": 50, "d2h": 50})
    check(near(r["copy_ms"], 30.0) and near(r["optimal_ms"], 30.0),
          "3 x 1 GB in room for 2, written back: 1.5 GB each way at 50 GB/s, 30 ms > native 10 ms (%.3f)"
          % r["optimal_ms"])
    r = o.yardstick(step, {i: g for i in range(3)}, 2 * g, 100.0, {"h2d": 50, "d2h": 50})
    check(near(r["optimal_ms"], 100.0), "the same with a 100 ms native step: the kernels bound it")

    # The period of a logged loop, with noise before it.
    body = [("x",)] * 7 + [(i,) for i in range(5)] * 6
    check(o.find_period(body)[0] == 5, "the period of a 5-launch loop after a prologue")
    runs = [(0,), (0,), (1,), (1,), (2,), (2,)] * 5
    check(o.find_period(runs)[0] == 6, "a loop of launches in runs of two: period 6, not 1")
    same = ([(i,) for i in range(20)] + [("s",)] * 300) * 4
    check(o.find_period(same)[0] == 320, "a step ending in 300 launches on one small tensor: period 320 (%d)"
          % o.find_period(same)[0])
    tail = body + [("end",), ("check",)]
    check(o.loop_end(tail, 5) == len(body), "launches after the loop are not the step")
    try:
        o.find_period([(i,) for i in range(20)])
        check(False, "no loop: refused")
    except ValueError:
        check(True, "no loop: refused")

    # A loop with a little wobble (two launches trading places every other
    # step) repeats best at two steps: the shortest within 5 points is kept.
    steps = []
    for i in range(40):
        s_ = [(k,) for k in range(50)]
        if i % 2:
            s_[10], s_[11] = s_[11], s_[10]
        steps += s_
    check(o.find_period(steps)[0] == 50, "a loop whose order wobbles: its step, not twice it (%d)"
          % o.find_period(steps)[0])

    # From a log file: a loop whose steps alternate two temporaries repeats
    # every two steps; with the launches a step makes given, per step.
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "log.bin")
        recs, no = [], 0
        for i in range(10):
            for k in [1, 2, 3, 4, 100 + i % 2]:
                no += 1
                recs.append(o.REC.pack(no, 0, no, k << 21, 2 * MiB, 0, 0))
        with open(path, "wb") as f:
            f.write(o.HEAD.pack(o.MAGIC, o.REC.size, 0, len(recs), 0) + b"".join(recs))
        link = {"h2d": 1, "d2h": 1}
        whole = o.from_log(path, 3 * 2 * MiB, 1.0, link)
        per = o.from_log(path, 3 * 2 * MiB, 1.0, link, step_launches=5)
        check(whole["period"] == 10 and per["steps_per_period"] == 2 and near(per["min_in_bytes"],
                                                                              whole["min_in_bytes"] / 2),
              "a period of two steps, divided: %s of %s bytes a step" % (per["min_in_bytes"], whole["min_in_bytes"]))
        check(per["native_ms"] == 1.0, "the native step stays one step's")

    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

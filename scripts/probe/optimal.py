#!/usr/bin/env python3
"""The honest yardstick for a spilling job: the fastest any schedule could
run the job's own step, from the sequence of allocations its kernel
launches reached (GVM_LAUNCH_LOG, preload/launchlog.h), a device limit, the
link's bandwidths and the native step time.

    scripts/probe/optimal.py LOG --limit 4G --native-ms 6.0 --h2d 55 --d2h 55
        [--h2d-duplex 50 --d2h-duplex 50 | --simplex] [--writes all|none]
        [--bypass] [--period P] [--step-launches N] [--json]

The model (docs/benchmarks.md, "The optimal schedule"):

- The step. The log is cut to its loop: the shortest period P (in
  launches) whose last 2P launches repeat within 5 points of the best
  (found from the launches' signatures as policy/recur.c does, or
  --period), and the last P launches that repeat the P before them are
  the loop (launches after it are left out). A loop spanning several of
  the program's steps (buffers alternating) is divided by P /
  --step-launches, so every figure is per step.
  The step is then repeated (WARM steps to fill the device, MEASURE steps
  counted): the steady state of a job running that step forever.
- What must be resident. A launch needs every allocation (region) it
  reaches wholly on the device while it runs; the regions of a launch and
  those kept for later share the limit (bytes; regions count their mapped
  bytes, small allocations their 2 MiB chunk).
- Which regions move: Belady's MIN. Before each launch, missing regions
  come in; while they do not fit, the resident region not reached by the
  launch whose next use is furthest ahead leaves. MIN moves the fewest
  regions of any schedule when regions are of one size (the spill
  benchmarks' tensors); with sizes that differ the fewest bytes is
  NP-hard and MIN is the usual near-optimal answer. Prefetching cannot do
  better: any schedule that loads early can be turned into a demand
  schedule moving no more.
- Reading in place (--bypass). Where kernels may read a region where it
  is (a peer GPU over NVLink: gvmshim's swap_in=host reads peer data in
  place), MIN may leave a missing region out, counting it among the
  candidates by its next use (Belady with bypass, optimal for one size);
  its bytes cross the link once per use, and back when written. On the
  cyclic loop this keeps C tensors and reads N - C in place: the bound.
- Write-backs. gvmshim keeps no host copy of a region that came back, so
  every eviction copies the region out (--writes all, the default). With
  --writes none every use is taken as a read and an eviction of a region
  only read since it came in costs no copy: what keeping host copies
  would buy. The log does not say which arguments a kernel writes.
- Time: optimal_ms = max(native step, copy time of MIN's bytes per
  step), the copy time with both directions running at once (duplex: H2D
  and D2H at --h2d-duplex / --d2h-duplex, measured together, while both
  have bytes to move, the rest at the one-way rate) or one after the
  other (--simplex). For regions of one size no schedule is faster: the
  kernels run at least the native step, each direction of the link
  copies at least MIN's bytes.
  What this leaves out, so the bound may not be reachable: a region's
  copy in must end before the launch that reaches it begins, and its
  room exists only once a victim's copy out has begun (gvmshim's swaps
  take room unit by unit as it leaves), which begins after the victim's
  last use. MIN's own victims would serialize the copies with the
  kernels (on a cycle it evicts the region just used, whose room is free
  only once that kernel ends); a schedule near the bound prefetches with
  other victims of the same count (integrated prefetching and caching),
  and comes near it only where the step's copies can spread over its
  kernels. Where the copies bunch up where kernels are short (Adam's
  sweeps over the moments), the best step lies above this bound.

The read loop checks it (tests/cpu/check_optimal.py): N equal tensors
read in a cycle with room for C of them: MIN brings in N(N-C)/(N-1)
tensors per pass (it faults on (N-C)/(N-1) of the references), LRU all N,
and the "bound" bench/spill.py prints counts N-C, which no schedule that
swaps reaches (after each launch only its own tensor is certainly
resident); reading in place (--bypass) does.
"""
import argparse
import json
import struct
import sys

MAGIC = b"GVMLLOG1"
HEAD = struct.Struct("<8sIIQQ")
REC = struct.Struct("<QQQQQII")
NEVER = float("inf")
WARM, MEASURE = 3, 12
MiB, GiB = 1 << 20, 1 << 30


def parse_size(s):
    s = str(s).strip().upper()
    mult = {"K": 1 << 10, "M": MiB, "G": GiB, "T": 1 << 40}
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def size_text(n):
    return "%.2f GiB" % (n / GiB) if n >= GiB else "%.1f MiB" % (n / MiB)


# ---- the log -------------------------------------------------------------------------


def read_log(path):
    """Returns (launches, sizes, info): launches in order, each a tuple of
    region keys; sizes: key -> bytes. A region is known by its base
    address: its buffer id changes at every move (as CUDA's does when
    memory is remapped)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < HEAD.size:
        raise ValueError("%s: too short for a launch log" % path)
    magic, rec_size, _, records, dropped = HEAD.unpack_from(data, 0)
    if magic != MAGIC or rec_size != REC.size:
        raise ValueError("%s: not a launch log (GVM_LAUNCH_LOG) of this version" % path)
    body = data[HEAD.size:HEAD.size + records * REC.size]
    if len(body) != records * REC.size:
        raise ValueError("%s: cut short (%d of %d records)" % (path, len(body) // REC.size, records))
    by_launch, sizes, partial = {}, {}, 0
    for launch, _stream, buf, base, nbytes, flags, _ in REC.iter_unpack(body):
        regions = by_launch.setdefault(launch, [])
        partial += flags & 1
        if buf:
            regions.append(base)
            sizes[base] = max(nbytes, sizes.get(base, 0))
    launches = [tuple(sorted(set(by_launch[k]))) for k in sorted(by_launch)]
    return launches, sizes, {"records": records, "dropped": dropped, "partial": partial}


def find_period(launches, most=None):
    """The period whose last 2P launches repeat best, among the distances
    at which the last launches' keys (a launch and the three before it, as
    policy/recur.c) were seen before: the shortest whose share of launches
    differing from the one P before is within 5 points of the best (a
    multiple of the step repeats as well as the step, and a step whose
    order wobbles a little may repeat a little better at twice its length)."""
    n = len(launches)
    sig = [hash(l) for l in launches]
    last, cands = {}, set()
    for i in range(3, n):
        key = tuple(sig[i - 3:i + 1])
        if key in last and i >= n - 256:
            cands.add(i - last[key])
        last[key] = i
    scored = []
    for p in sorted(cands):
        if 2 * p > n or (most and p > most):
            continue
        span = min(2 * p, n - p)
        scored.append((p, sum(sig[n - 1 - j] != sig[n - 1 - j - p] for j in range(span)) / float(span)))
    if not scored or min(m for _, m in scored) > 0.5:
        raise ValueError("no repeating step found in %d launches (run more steps, or give --period)" % n)
    least = min(m for _, m in scored)
    return next((p, m) for p, m in scored if m <= least + 0.05)


# ---- MIN and LRU over a repeated step ------------------------------------------------


def next_uses(seq):
    """For each position, {key: position of its next use} (NEVER: none)."""
    nxt, last = [None] * len(seq), {}
    for i in range(len(seq) - 1, -1, -1):
        nxt[i] = {k: last.get(k, NEVER) for k, _ in seq[i]}
        for k, _ in seq[i]:
            last[k] = i
    return nxt


def check_fits(step, sizes, capacity):
    for i, launch in enumerate(step):
        need = sum(sizes[k] for k, _ in launch)
        if need > capacity:
            raise ValueError("launch %d of the step reaches %d bytes, more than the limit (%d)" % (i, need, capacity))


def simulate(step, sizes, capacity, policy="min", warm=WARM, measure=MEASURE, bypass=False):
    """Runs the step warm + measure times under MIN (or LRU); returns the
    per-step bytes in and out over the measured steps. bypass: a missing
    region may also be reached where it is (read in place across the
    link, as a kernel reads a peer's memory over NVLink) instead of
    coming in: MIN then counts it among the candidates to leave, by its
    next use; its bytes cross the link once (and back when written)."""
    seq = step * (warm + measure)
    nxt = next_uses(seq) if policy == "min" else None
    resident, dirty = {}, set()
    used = 0
    moved_in = moved_out = 0
    start = warm * len(step)
    for i, launch in enumerate(seq):
        keys = [k for k, _ in launch]
        written = {k for k, w in launch if w}
        need = [k for k in keys if k not in resident]
        incoming = sum(sizes[k] for k in need)
        coming = {k: nxt[i][k] if policy == "min" else i for k in need}
        counted = i >= start
        while used + incoming > capacity:
            cands = [k for k in resident if k not in keys]
            if bypass and policy == "min":
                cands += list(coming)
            if policy == "min":
                victim = max(cands, key=lambda k: (coming.get(k, resident.get(k)), sizes[k]))
            else:
                victim = min(cands, key=lambda k: resident[k])
            if victim in coming:   # read in place: never resident
                del coming[victim]
                incoming -= sizes[victim]
                if counted:
                    moved_in += sizes[victim]
                    moved_out += sizes[victim] if victim in written else 0
                continue
            used -= sizes[victim]
            del resident[victim]
            if victim in dirty:
                if counted:
                    moved_out += sizes[victim]
                dirty.discard(victim)
        for k in coming:
            used += sizes[k]
            if counted:
                moved_in += sizes[k]
        for k, writes in launch:
            if k not in resident and k not in coming:
                continue
            resident[k] = nxt[i][k] if policy == "min" else i
            if writes:
                dirty.add(k)
    return moved_in / float(measure), moved_out / float(measure)


# ---- time ------------------------------------------------------------------------------


def copy_seconds(bytes_in, bytes_out, link):
    """Both directions' copies: at once while both have bytes (duplex
    rates), the rest at the one-way rate; or one after the other."""
    h, d = link["h2d"] * 1e9, link["d2h"] * 1e9
    if link.get("simplex"):
        return bytes_in / h + bytes_out / d
    hd, dd = link.get("h2d_duplex", link["h2d"]) * 1e9, link.get("d2h_duplex", link["d2h"]) * 1e9
    t_in, t_out = bytes_in / hd, bytes_out / dd
    both = min(t_in, t_out)
    if t_in > t_out:
        return both + (bytes_in - both * hd) / h
    return both + (bytes_out - both * dd) / d


# ---- the yardstick ---------------------------------------------------------------------


def yardstick(step, sizes, capacity, native_ms, link, warm=WARM, measure=MEASURE, bypass=False):
    """step: list of launches, each a list of (key, writes). Returns a dict."""
    try:
        check_fits(step, sizes, capacity)
        fits = True
    except ValueError:
        if not bypass:
            raise
        fits = False
    b_in, b_out = simulate(step, sizes, capacity, "min", warm, measure, bypass)
    # LRU swaps, for comparison (none where a launch alone passes the limit)
    l_in, l_out = simulate(step, sizes, capacity, "lru", warm, measure) if fits else (None, None)
    copy_ms = 1e3 * copy_seconds(b_in, b_out, link)
    regions = {k for l in step for k, _ in l}
    return {"launches": len(step), "regions": len(regions), "step_bytes": sum(sizes[k] for k in regions),
            "capacity": capacity, "min_in_bytes": b_in, "min_out_bytes": b_out, "lru_in_bytes": l_in,
            "lru_out_bytes": l_out, "native_ms": native_ms, "copy_ms": copy_ms,
            "optimal_ms": max(native_ms, copy_ms), "bypass": bypass}


def loop_end(launches, period):
    """Where the loop's last full repeat ends: launches after the last
    one that matches the launch a period before (the program's last
    launches after its loop: a final check, a clean-up) are not the step."""
    end = len(launches)
    while end > 2 * period and launches[end - 1] != launches[end - 1 - period] and len(launches) - end < period:
        end -= 1
    return end


def from_log(path, capacity, native_ms, link, writes="all", period=None, bypass=False, step_launches=None):
    """step_launches: about how many launches one step of the program
    makes (launches scanned / steps run): a period found that spans
    several steps (a loop whose steps alternate buffers) is divided."""
    launches, sizes, info = read_log(path)
    if period:
        miss = None
        if 2 * period > len(launches):
            raise ValueError("--period %d: the log holds only %d launches" % (period, len(launches)))
    else:
        period, miss = find_period(launches)
    end = loop_end(launches, period)
    step = [[(k, writes == "all") for k in l] for l in launches[end - period:end]]
    per = max(1, int(round(period / float(step_launches)))) if step_launches else 1
    if per > 1:
        # The period's copies over as many of the native steps.
        res = yardstick(step, sizes, capacity, native_ms * per, link, bypass=bypass)
        for k in ("min_in_bytes", "min_out_bytes", "lru_in_bytes", "lru_out_bytes", "native_ms", "copy_ms",
                  "optimal_ms"):
            if res[k] is not None:
                res[k] /= per
    else:
        res = yardstick(step, sizes, capacity, native_ms, link, bypass=bypass)
    res.update({"steps_per_period": per, "period": period, "period_miss": miss, "log_launches": len(launches), "log": info,
                "writes": writes})
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log", help="a GVM_LAUNCH_LOG file")
    ap.add_argument("--limit", required=True, help="device limit (bytes, K/M/G/T)")
    ap.add_argument("--native-ms", type=float, required=True, help="the step's time natively (it fits)")
    ap.add_argument("--h2d", type=float, required=True, help="host to device GB/s, alone")
    ap.add_argument("--d2h", type=float, required=True, help="device to host GB/s, alone")
    ap.add_argument("--h2d-duplex", type=float, help="H2D GB/s while D2H runs too [--h2d]")
    ap.add_argument("--d2h-duplex", type=float, help="D2H GB/s while H2D runs too [--d2h]")
    ap.add_argument("--simplex", action="store_true", help="the two directions never copy at once")
    ap.add_argument("--writes", choices=["all", "none"], default="all",
                    help="all: every eviction copies out (gvmshim); none: clean evictions are free [all]")
    ap.add_argument("--bypass", action="store_true",
                    help="a region may be read where it is instead of coming in (a peer over NVLink)")
    ap.add_argument("--period", type=int, help="launches per period of the loop (default: found in the log)")
    ap.add_argument("--step-launches", type=float,
                    help="about how many launches a step makes: a period found spanning several is divided")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    a = ap.parse_args()
    link = {"h2d": a.h2d, "d2h": a.d2h, "simplex": a.simplex}
    if a.h2d_duplex:
        link["h2d_duplex"] = a.h2d_duplex
    if a.d2h_duplex:
        link["d2h_duplex"] = a.d2h_duplex
    try:
        r = from_log(a.log, parse_size(a.limit), a.native_ms, link, a.writes, a.period, a.bypass, a.step_launches)
    except (OSError, ValueError) as e:
        print("optimal: %s" % e, file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps(r))
        return 0
    if r["log"]["partial"] or r["log"]["dropped"]:
        print("note: the log has %d launches scanned in part and %d records dropped: the step may be incomplete"
              % (r["log"]["partial"], r["log"]["dropped"]))
    print("loop: %d launches (%s of them differing from the period before), %d step(s), %d regions, %s"
          % (r["launches"], "%.1f%%" % (100 * r["period_miss"]) if r["period_miss"] is not None else "-",
             r["steps_per_period"], r["regions"], size_text(r["step_bytes"])))
    lru = ("LRU: %s in, %s out" % (size_text(r["lru_in_bytes"]), size_text(r["lru_out_bytes"]))
           if r["lru_in_bytes"] is not None else "LRU: a launch alone passes the limit")
    print("limit %s; per step MIN%s moves %s in, %s out (%s)"
          % (size_text(r["capacity"]), " with reads in place" if r["bypass"] else "", size_text(r["min_in_bytes"]),
             size_text(r["min_out_bytes"]), lru))
    print("native %.2f ms, copies %.2f ms: optimal %.2f ms"
          % (r["native_ms"], r["copy_ms"], r["optimal_ms"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

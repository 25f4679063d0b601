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
  launches) whose share of the last launches differing from the launch P
  before is within 5 points of the best candidate's (candidates from the
  launches' signatures as policy/recur.c finds them, all judged over the
  same launches; or --period), and the last P launches that repeat the P before them are
  the loop (launches after it are left out). A loop spanning several of
  the program's steps (buffers alternating) is divided by P /
  --step-launches, so every figure is per step.
  The step is then repeated from an empty device until the state at a
  step's start (what is resident and dirty) comes again: the steps from
  then on cycle, and their average is the exact steady state of a job
  running that step forever.
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
import collections
import json
import struct
import sys

MAGIC = b"GVMLLOG1"
HEAD = struct.Struct("<8sIIQQ")
REC = struct.Struct("<QQQQQII")
NEVER = float("inf")
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
    """The period whose last launches repeat best, among the distances
    at which the last launches' keys (a launch and the three before it, as
    policy/recur.c) were seen before (the last 8 times, and the distances
    most common in the log): the shortest whose share of launches
    differing from the one P before is within 5 points of the best (a
    multiple of the step repeats as well as the step, and a step whose
    order wobbles a little may repeat a little better at twice its length)."""
    n = len(launches)
    sig = [hash(l) for l in launches]
    # A key may come back within a step too (launches on the same small
    # tensors in a row): the distances to its last 8 occurrences count, and
    # the 32 distances between a key and its previous occurrence most
    # common in the whole log (a step that ends in such a run still has
    # keys seen once a step).
    seen, cands, common = {}, set(), collections.Counter()
    for i in range(3, n):
        key = tuple(sig[i - 3:i + 1])
        before = seen.setdefault(key, [])
        if before:
            common[i - before[-1]] += 1
        if i >= n - 256:
            cands.update(i - j for j in before)
        before.append(i)
        del before[:-8]
    cands.update(g for g, _ in common.most_common(32))
    cands = sorted(p for p in cands if 2 * p <= n and not (most and p > most))
    if not cands:
        raise ValueError("no repeating step found in %d launches (run more steps, or give --period)" % n)
    # Every candidate judged over the same launches, two of the longest:
    # over its own two lengths, a short one inside a run of one launch
    # would match perfectly.
    span = min(2 * cands[-1], n - cands[-1])
    scored = [(p, sum(sig[n - 1 - j] != sig[n - 1 - j - p] for j in range(span)) / float(span)) for p in cands]
    if not scored or min(m for _, m in scored) > 0.5:
        raise ValueError("no repeating step found in %d launches (run more steps, or give --period)" % n)
    least = min(m for _, m in scored)
    return next((p, m) for p, m in scored if m <= least + 0.05)


# ---- MIN and LRU over a repeated step ------------------------------------------------


def next_uses(seq):
    """For each position of a finite sequence, {key: position of its next
    use} (NEVER: none)."""
    nxt, last = [None] * len(seq), {}
    for i in range(len(seq) - 1, -1, -1):
        nxt[i] = {k: last.get(k, NEVER) for k, _ in seq[i]}
        for k, _ in seq[i]:
            last[k] = i
    return nxt


def cyclic_gaps(step):
    """For each launch of a step repeated forever, {key: launches until
    the key's next use} (a step's regions all come again)."""
    pos = {}
    for j, launch in enumerate(step):
        for k, _ in launch:
            if not pos.get(k) or pos[k][-1] != j:
                pos.setdefault(k, []).append(j)
    gaps = []
    for j, launch in enumerate(step):
        g = {}
        for k, _ in launch:
            later = [q for q in pos[k] if q > j]
            g[k] = (later[0] if later else pos[k][0] + len(step)) - j
        gaps.append(g)
    return gaps


class Cache:
    """The device under MIN (victim: the next use furthest ahead) or LRU
    (the least recently used). rank breaks ties in next use, so that a
    state (what is resident and dirty) decides what follows."""

    def __init__(self, sizes, capacity, policy, bypass, rank):
        self.sizes, self.capacity, self.policy, self.bypass, self.rank = sizes, capacity, policy, bypass, rank
        self.resident, self.dirty, self.used = {}, set(), 0

    def launch(self, launch, i, nxt):
        """Makes launch i's regions resident (nxt: key -> its next use);
        returns the bytes it moves in and out."""
        sizes, resident, b_in, b_out = self.sizes, self.resident, 0, 0
        keys = [k for k, _ in launch]
        written = {k for k, w in launch if w}
        coming = {k: nxt[k] if self.policy == "min" else i for k in keys if k not in resident}
        incoming = sum(sizes[k] for k in coming)
        while self.used + incoming > self.capacity:
            cands = [k for k in resident if k not in keys]
            if self.bypass and self.policy == "min":
                cands += list(coming)
            if self.policy == "min":
                victim = max(cands, key=lambda k: (coming.get(k, resident.get(k)), sizes[k], -self.rank.get(k, 0)))
            else:
                victim = min(cands, key=lambda k: resident[k])
            if victim in coming:   # read in place: never resident
                del coming[victim]
                incoming -= sizes[victim]
                b_in += sizes[victim]
                b_out += sizes[victim] if victim in written else 0
                continue
            self.used -= sizes[victim]
            del resident[victim]
            if victim in self.dirty:
                b_out += sizes[victim]
                self.dirty.discard(victim)
        for k in coming:
            self.used += sizes[k]
            b_in += sizes[k]
        for k, writes in launch:
            if k not in resident and k not in coming:
                continue
            resident[k] = nxt[k] if self.policy == "min" else i
            if writes:
                self.dirty.add(k)
        return b_in, b_out

    def state(self):
        """What decides the future of a repeated step at a step's start:
        under MIN the resident and dirty sets (each region's next use is
        its first in the step), under LRU also their order of use."""
        if self.policy == "min":
            return frozenset(self.resident), frozenset(self.dirty)
        return tuple(sorted(self.resident, key=self.resident.get)), frozenset(self.dirty)


def ranks(seq):
    r = {}
    for launch in seq:
        for k, _ in launch:
            r.setdefault(k, len(r))
    return r


def simulate_finite(seq, sizes, capacity, policy="min", bypass=False):
    """MIN (or LRU) over a finite sequence of launches, from an empty
    device: the bytes moved in and out in all."""
    nxt = next_uses(seq)
    c = Cache(sizes, capacity, policy, bypass, ranks(seq))
    total_in = total_out = 0
    for i, launch in enumerate(seq):
        b_in, b_out = c.launch(launch, i, nxt[i])
        total_in += b_in
        total_out += b_out
    return total_in, total_out


MAX_VISITS = 4000000   # launches simulated at most while looking for the steady state


def simulate(step, sizes, capacity, policy="min", bypass=False):
    """The step repeated forever under MIN (or LRU): the bytes moved in
    and out per step in the steady state. From an empty device, step
    after step, until the state at a step's start repeats: from then on
    the steps cycle, and their average is exact. (On a cycle of N equal
    tensors in room for C, MIN's steps differ and repeat only after
    N - 1 of them.) Where no state repeats within MAX_VISITS launches,
    the average of the second half."""
    gaps = cyclic_gaps(step)
    c = Cache(sizes, capacity, policy, bypass, ranks(step))
    seen, per_step = {}, []
    most = max(8, MAX_VISITS // max(1, len(step)))
    for rep in range(most):
        st = c.state()
        if st in seen:
            cycle = per_step[seen[st]:]
            return (sum(x for x, _ in cycle) / float(len(cycle)), sum(y for _, y in cycle) / float(len(cycle)))
        seen[st] = rep
        s_in = s_out = 0
        for j, launch in enumerate(step):
            i = rep * len(step) + j
            b_in, b_out = c.launch(launch, i, {k: i + g for k, g in gaps[j].items()})
            s_in += b_in
            s_out += b_out
        per_step.append((s_in, s_out))
    half = per_step[len(per_step) // 2:]
    return sum(x for x, _ in half) / float(len(half)), sum(y for _, y in half) / float(len(half))


def check_fits(step, sizes, capacity):
    for i, launch in enumerate(step):
        need = sum(sizes[k] for k, _ in launch)
        if need > capacity:
            raise ValueError("launch %d of the step reaches %d bytes, more than the limit (%d)" % (i, need, capacity))




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


def yardstick(step, sizes, capacity, native_ms, link, bypass=False):
    """step: list of launches, each a list of (key, writes). Returns a dict."""
    try:
        check_fits(step, sizes, capacity)
        fits = True
    except ValueError:
        if not bypass:
            raise
        fits = False
    b_in, b_out = simulate(step, sizes, capacity, "min", bypass)
    # LRU swaps, for comparison (none where a launch alone passes the limit)
    l_in, l_out = simulate(step, sizes, capacity, "lru") if fits else (None, None)
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

#!/usr/bin/env python3
"""What prefetching could give the spill read loop, measured natively with
the swaps scheduled by hand: bench/spill.py's loop (acc += (W @ x).sum()
over N weights of 128 MiB) with only SLOTS weights on the device, the rest
in pinned host memory, each step bringing the missing ones in, a weight
out for each (copied out: a spill cannot know the weight was only read).
One spare slot is the room a swap lands in, as gvmshim keeps. Victim: the
weight used last (Belady's choice for a sweep). Three schedules:
  fits      every weight on the device (no swaps)
  sync      as gvmshim swaps today: before the launch that needs a weight,
            wait for the device, copy in and out at once, wait, launch
  ahead     the next swap issued as soon as its victim's kernel is queued,
            ordered by events on the GPU, never waited for by the CPU: the
            copies run beside the kernels in between
Prints each step time and (step - fits) / (off-device bytes / H2D link).
    python3 scripts/probe/overlap.py [--ws 1.25,1.5,2] [--limit-slots 30]"""
import argparse
import time

import torch

MiB = 1 << 20
COLS = 8192


def link_h2d(n):
    h = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    d = torch.empty(n, dtype=torch.uint8, device="cuda")
    d.copy_(h, non_blocking=True)
    torch.cuda.synchronize()
    v = []
    for _ in range(5):
        t0 = time.perf_counter()
        d.copy_(h, non_blocking=True)
        torch.cuda.synchronize()
        v.append(n / (time.perf_counter() - t0))
    return sorted(v)[2]


class Loop:
    def __init__(self, n, slots, tensor_bytes):
        self.n, self.slots = n, slots
        rows = tensor_bytes // (4 * COLS)
        g = torch.Generator(device="cuda")
        g.manual_seed(5)
        self.x = torch.randn(COLS, 64, device="cuda", generator=g)
        self.host = []
        for _ in range(n):
            t = torch.empty(rows, COLS, device="cuda")
            t.uniform_(-1, 1, generator=g)
            h = torch.empty(rows, COLS, pin_memory=True)
            h.copy_(t)
            self.host.append(h)
        self.dev = [torch.empty(rows, COLS, device="cuda") for _ in range(min(n, slots) + 1)]
        self.s_in, self.s_out = torch.cuda.Stream(), torch.cuda.Stream()
        self.reset()

    def reset(self):
        k = min(self.n, self.slots)
        self.where = {w: w for w in range(k)}          # weight -> device buffer
        for w in range(k):
            self.dev[w].copy_(self.host[w])
        self.room = k
        self.last = None
        torch.cuda.synchronize()

    def victim(self, keep):
        # The weight used last that is not needed now (a sweep's Belady).
        order = sorted(self.where, key=lambda w: self.used.get(w, -1), reverse=True)
        for w in order:
            if w != keep:
                return w
        return None

    def swap(self, w, after=None):
        """w in, a victim out, into the room; returns the event the kernel
        reading w waits for."""
        v = self.victim(w)
        vb, room = self.where.pop(v), self.room
        if after is not None:
            self.s_out.wait_event(after)
        with torch.cuda.stream(self.s_out):
            self.host[v].copy_(self.dev[vb], non_blocking=True)
            out_done = torch.cuda.Event()
            out_done.record(self.s_out)
        if self.pending_out is not None:
            self.s_in.wait_event(self.pending_out)   # the room is free once its last victim left
        with torch.cuda.stream(self.s_in):
            self.dev[room].copy_(self.host[w], non_blocking=True)
            in_done = torch.cuda.Event()
            in_done.record(self.s_in)
        self.where[w] = room
        self.room = vb
        self.pending_out = out_done
        return in_done

    def step(self, mode):
        acc = torch.zeros((), device="cuda")
        self.pending_out = None
        ready = {}
        order = list(range(self.n))
        for i, w in enumerate(order):
            if w not in self.where:
                if mode == "sync":
                    torch.cuda.synchronize()
                    ev = self.swap(w)
                    ev.synchronize()
                    self.pending_out.synchronize()
                else:
                    ready[w] = self.swap(w, after=self.kernel_done)
            if w in ready:
                torch.cuda.current_stream().wait_event(ready.pop(w))
            acc += (self.dev[self.where[w]] @ self.x).sum()
            self.used[w] = self.clock
            self.clock += 1
            self.kernel_done = torch.cuda.Event()
            self.kernel_done.record()
            if mode == "ahead":
                # The next missing weight's swap, as soon as a victim is free.
                for w2 in order[i + 1:]:
                    if w2 not in self.where:
                        ready[w2] = self.swap(w2, after=self.kernel_done)
                        break
        return float(acc.item())

    def run(self, mode, steps, warmup):
        self.reset()
        self.used, self.clock, self.kernel_done = {}, 0, None
        times, sums = [], []
        for i in range(warmup + steps):
            t0 = time.perf_counter()
            sums.append(self.step(mode))
            if i >= warmup:
                times.append(time.perf_counter() - t0)
        times.sort()
        return 1e3 * times[len(times) // 2], sums[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ws", default="1.25,1.5,2", help="working sets as multiples of the limit [1.25,1.5,2]")
    ap.add_argument("--limit-slots", type=int, default=30,
                    help="weights the limit holds beside the room (gvmshim's 4 GiB limit left ~30 of 32) [30]")
    ap.add_argument("--limit", type=int, default=32, help="weights a limit counts as its size [32 = 4 GiB]")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    o = ap.parse_args()
    tb = 128 * MiB
    link = link_h2d(tb)
    print("device %s, H2D %.1f GB/s, %d slots + 1 room, weights of 128 MiB" %
          (torch.cuda.get_device_name(0), link / 1e9, o.limit_slots))
    print("%6s %8s %9s %9s %9s %9s %11s %11s %6s" % ("x lim", "weights", "fits ms", "sync ms", "ahead ms",
                                                      "bound ms", "sync/bound", "ahead/bound", "same"))
    for r in [float(v) for v in o.ws.split(",")]:
        n = int(round(r * o.limit))
        fits_loop = Loop(n, n, tb)
        fits, ref = fits_loop.run("fits", o.steps, o.warmup)
        del fits_loop
        torch.cuda.empty_cache()
        loop = Loop(n, o.limit_slots, tb)
        sync, s1 = loop.run("sync", o.steps, o.warmup)
        ahead, s2 = loop.run("ahead", o.steps, o.warmup)
        off = max(0, n - o.limit) * tb
        b = off / link * 1e3
        print("%6.2f %8d %9.1f %9.1f %9.1f %9.1f %11.2f %11.2f %6s" % (
            r, n, fits, sync, ahead, fits + b, (sync - fits) / b if b else 0, (ahead - fits) / b if b else 0,
            "yes" if s1 == ref and s2 == ref else "NO"))
        del loop
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

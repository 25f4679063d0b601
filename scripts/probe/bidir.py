#!/usr/bin/env python3
"""What a swap's copies cost natively: H2D alone, D2H alone and both at
once on two streams (pinned host memory), per size; a swap moves one
region in while another goes out, so its floor is the pair, not either
copy alone.   python3 scripts/probe/bidir.py [MiB ...]"""
import sys
import time

import torch


def timed(fn, reps=20):
    fn()
    torch.cuda.synchronize()
    v = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        v.append(time.perf_counter() - t0)
    v.sort()
    return 1e3 * v[len(v) // 2]


def main():
    sizes = [int(a) for a in sys.argv[1:]] or [64, 128, 1024]
    s_in, s_out = torch.cuda.Stream(), torch.cuda.Stream()
    print("device %s" % torch.cuda.get_device_name(0))
    print("%8s %10s %10s %10s %14s %14s" % ("MiB", "H2D ms", "D2H ms", "both ms", "both/H2D", "GB/s each way"))
    for mib in sizes:
        n = mib << 20
        h_in = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        h_out = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        d_in = torch.empty(n, dtype=torch.uint8, device="cuda")
        d_out = torch.ones(n, dtype=torch.uint8, device="cuda")

        def h2d():
            with torch.cuda.stream(s_in):
                d_in.copy_(h_in, non_blocking=True)

        def d2h():
            with torch.cuda.stream(s_out):
                h_out.copy_(d_out, non_blocking=True)

        def both():
            h2d()
            d2h()

        a, b, c = timed(h2d), timed(d2h), timed(both)
        print("%8d %10.3f %10.3f %10.3f %14.2f %14.1f" % (mib, a, b, c, c / a, n / c / 1e6))
        del h_in, h_out, d_in, d_out


if __name__ == "__main__":
    main()

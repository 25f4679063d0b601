#!/usr/bin/env python3
"""The fewest 128 MiB tensors a spilling training step must bring in
(Belady: the victim is the tensor needed furthest ahead), for the order in
which bench/spill.py's step reaches its tensors: zero_grad, forward,
backward (one temporary gradient, reused from PyTorch's cache), then Adam
fused (one pass over each weight, gradient and moments) or foreach (the
default: a pass per operation; sqrt's 12 results are cached tensors too).
A model of the order, not a recorded trace.
    python3 scripts/probe/adam-belady.py [slots ...]"""
import sys

N = 12


def step_head():
    s = ["G%d" % i for i in range(N)] + ["W%d" % i for i in range(N)]
    for i in reversed(range(N)):
        s += ["T", "G%d" % i]
    return s


def fused():
    s = step_head()
    for i in range(N):
        s += ["W%d" % i, "G%d" % i, "m%d" % i, "v%d" % i]
    return s


def foreach():
    s = step_head()
    s += [t for i in range(N) for t in ("m%d" % i, "G%d" % i)]          # exp_avg.lerp_(grad)
    s += ["v%d" % i for i in range(N)]                                  # exp_avg_sq.mul_()
    s += [t for i in range(N) for t in ("v%d" % i, "G%d" % i)]          # .addcmul_(grad, grad)
    s += [t for i in range(N) for t in ("v%d" % i, "D%d" % i)]          # denom = sqrt(exp_avg_sq)
    s += ["D%d" % i for i in range(N)] * 2                              # denom.div_(), .add_(eps)
    s += [t for i in range(N) for t in ("W%d" % i, "m%d" % i, "D%d" % i)]  # param.addcdiv_()
    return s


def misses(seq, slots, steps):
    full = seq * steps
    nxt, last = [0] * len(full), {}
    for i in range(len(full) - 1, -1, -1):
        nxt[i] = last.get(full[i], len(full) + 1)
        last[full[i]] = i
    held, count = {}, 0
    for i, t in enumerate(full):
        if t not in held:
            count += 1
            if len(held) >= slots:
                del held[max(held, key=held.get)]
        held[t] = nxt[i]
    return count


def main():
    slots = [int(a) for a in sys.argv[1:]] or [27, 28, 29, 30]
    print("%-8s %6s %16s %14s" % ("adam", "slots", "tensors in/step", "GiB in/step"))
    for name, order in (("fused", fused), ("foreach", foreach)):
        seq = order()
        for k in slots:
            per = (misses(seq, k, 13) - misses(seq, k, 3)) / 10.0   # steady state
            print("%-8s %6d %16.1f %14.2f" % (name, k, per, per / 8.0))


if __name__ == "__main__":
    main()

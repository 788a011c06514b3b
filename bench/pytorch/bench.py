#!/usr/bin/env python3
"""PyTorch twins of the `cargo xtask bench` cases (SPEC 5).

Run from a virtualenv with torch installed (see README.md beside this file); `cargo xtask bench
--compare` runs it in the same invocation and prints ratios. Prints one JSON line per case,
with the same fields as the Rust side: case, engine, threads, median_ms, min_ms, max_ms, reps.
"""
import argparse
import json
import resource
import subprocess
import sys
import time

import torch


def measure(fn, reps, warmup=2):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    return {"median_ms": round(times[len(times) // 2], 4), "min_ms": round(times[0], 4),
            "max_ms": round(times[-1], 4), "reps": reps}


def row(case, threads, stats, **extra):
    r = {"case": case, "engine": "pytorch", "threads": threads, **stats, **extra}
    print(json.dumps(r), flush=True)


TAPE_OPS = 10_000


def tape_overhead(threads, reps):
    x0 = (0.1 * torch.arange(16, dtype=torch.float32)).requires_grad_(True)

    def once():
        y = x0
        for i in range(TAPE_OPS):
            k = i % 3
            if k == 0:
                y = y * 0.999
            elif k == 1:
                y = y + 0.001
            else:
                y = torch.tanh(y)
        y.backward(torch.ones(16))
        x0.grad = None

    s = measure(once, reps)
    row("tape_overhead", threads, s, ops=TAPE_OPS, us_per_op=round(s["median_ms"] * 1e3 / TAPE_OPS, 4))


def relu_chain(threads, reps):
    for n in (1024, 4096, 16384):
        x = torch.tensor([0.5, -1.0, 2.0, 0.25], dtype=torch.float64, requires_grad=True)
        y = x
        for _ in range(n):
            y = torch.relu(y)
        seed = torch.ones(4, dtype=torch.float64)

        def backward():
            (g,) = torch.autograd.grad(y, x, seed, retain_graph=True)
            return g

        row("relu_chain_backward", threads, measure(backward, reps, warmup=1), nodes=n)


def matmul(n):
    def case(threads, reps):
        a = torch.randn(n, n, dtype=torch.float32)
        b = torch.randn(n, n, dtype=torch.float32)
        s = measure(lambda: torch.mm(a, b), reps)
        row(f"matmul_{n}", threads, s, gflops=round(2 * n**3 / (s["median_ms"] * 1e6), 2))
    return case


def deep_backward_memory_child(threads):
    """200 x (Linear 512->512, tanh), batch 64, forward + backward; peak RSS of this process."""
    torch.manual_seed(0)
    layers = [torch.nn.Linear(512, 512) for _ in range(200)]
    x = torch.randn(64, 512)

    def step():
        h = x
        for l in layers:
            h = torch.tanh(l(h))
        h.sum().backward()
        for l in layers:
            l.weight.grad = None
            l.bias.grad = None

    s = measure(step, 7, warmup=1)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    row("deep_backward_memory", threads, s, peak_rss_mb=round(peak_kb / 1024, 1))


def deep_backward_memory(threads, reps):
    # a fresh process, so the peak RSS is this case's alone
    out = subprocess.run([sys.executable, __file__, "--child", "deep_backward_memory", "--threads", str(threads)],
                         capture_output=True, text=True, check=True)
    sys.stdout.write(out.stdout)


CASES = {
    "tape_overhead": tape_overhead,
    "relu_chain": relu_chain,
    "matmul_1024": matmul(1024),
    "matmul_2048": matmul(2048),
    "deep_backward_memory": deep_backward_memory,
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--threads", default="2")
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--child")
    a = p.parse_args()
    if a.child:
        torch.set_num_threads(int(a.threads))
        deep_backward_memory_child(int(a.threads))
        return
    for t in (int(x) for x in a.threads.split(",")):
        torch.set_num_threads(t)
        for c in a.cases.split(","):
            if c in CASES:
                CASES[c](t, a.reps)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""PyTorch twins of the `cargo xtask bench` cases (SPEC 5).

Run from a virtualenv with torch installed (see README.md beside this file); `cargo xtask bench
--compare` runs it in the same invocation and prints ratios. Prints one JSON line per case,
with the same fields as the Rust side: case, engine, threads, median_ms, min_ms, max_ms, reps.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

try:
    import torch
except ImportError:  # onnxruntime's row of resnet18_forward needs only onnxruntime and numpy
    torch = None


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


PEER_MATMUL = r"""
import json, os, sys, time
n, threads, reps, peer = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
# pin the peer to `threads` CPUs: XLA's CPU backend does not honour a thread count otherwise
os.sched_setaffinity(0, set(range(threads)))
def measure(fn):
    for _ in range(2):
        fn()
    t = []
    for _ in range(reps):
        s = time.perf_counter(); fn(); t.append((time.perf_counter() - s) * 1e3)
    t.sort()
    return t
if peer == "numpy":
    import numpy as np
    from threadpoolctl import threadpool_info, threadpool_limits
    threadpool_limits(threads)
    a = np.random.rand(n, n).astype(np.float32); b = np.random.rand(n, n).astype(np.float32)
    t = measure(lambda: a @ b)
    info = [i for i in threadpool_info() if i.get("internal_api") == "openblas"]
    kernel = info[0].get("architecture", "?") if info else "?"
    engine = "numpy-openblas"
else:
    import jax, jax.numpy as jnp
    a = jnp.ones((n, n), jnp.float32); b = jnp.ones((n, n), jnp.float32)
    mm = jax.jit(lambda x, y: x @ y)
    t = measure(lambda: mm(a, b).block_until_ready())
    kernel = jax.__version__
    engine = "jax-xla"
med = t[len(t) // 2]
print(json.dumps({"case": f"matmul_{n}", "engine": engine, "threads": threads, "median_ms": round(med, 4),
                  "min_ms": round(t[0], 4), "max_ms": round(t[-1], 4), "reps": reps,
                  "gflops": round(2 * n**3 / (med * 1e6), 2), "kernel": kernel}), flush=True)
"""


def peer_matmul(n, threads, reps, peer):
    """numpy (OpenBLAS) and JAX (XLA) as the other matmul peers, each in a subprocess: OpenBLAS
    with the machine's OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE overrides removed (they pin an older
    kernel), XLA with its thread count set before import."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    env["OPENBLAS_NUM_THREADS"] = str(threads)
    if threads == 1:
        env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    out = subprocess.run([sys.executable, "-c", PEER_MATMUL, str(n), str(threads), str(reps), peer],
                         capture_output=True, text=True, env=env)
    if out.returncode == 0:
        sys.stdout.write(out.stdout)
    else:
        print(f"peer {peer} unavailable: {out.stderr.strip().splitlines()[-1:]}", file=sys.stderr)


def matmul(n):
    def case(threads, reps):
        a = torch.randn(n, n, dtype=torch.float32)
        b = torch.randn(n, n, dtype=torch.float32)
        s = measure(lambda: torch.mm(a, b), reps)
        row(f"matmul_{n}", threads, s, gflops=round(2 * n**3 / (s["median_ms"] * 1e6), 2))
        for peer in ("numpy", "jax"):
            peer_matmul(n, threads, reps, peer)
    return case


def deep_backward_memory_child(threads):
    """200 x (Linear 512->512, tanh), batch 64, forward + backward; peak RSS of this process.
    Subnormals are flushed to zero, as in ours (see deep_backward_memory in xtask's cases.rs)."""
    flushed = torch.set_flush_denormal(True)
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
    row("deep_backward_memory", threads, s, peak_rss_mb=round(peak_kb / 1024, 1), flush_denormal=flushed)


def deep_backward_memory(threads, reps):
    # a fresh process, so the peak RSS is this case's alone
    out = subprocess.run([sys.executable, __file__, "--child", "deep_backward_memory", "--threads", str(threads)],
                         capture_output=True, text=True, check=True)
    sys.stdout.write(out.stdout)


LR = 0.01


def mlp_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                               torch.nn.ReLU(), torch.nn.Linear(256, 10))


def conv_model():
    # stride 1, padding 0: 28 -> 26 -> 24, as the Rust case
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 16, 3),
                               torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(16 * 24 * 24, 10))


def train_case(name, make_model, x_shape, kind):
    """One SGD step (forward, F.cross_entropy mean, backward, torch.optim.SGD step, zero_grad);
    then the JAX twin in a subprocess."""
    def case(threads, reps):
        model = make_model()
        b = x_shape[0]
        x = torch.rand(*x_shape)
        y = (torch.arange(b) * 7 + 3) % 10
        opt = torch.optim.SGD(model.parameters(), lr=LR)

        def step():
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()

        s = measure(step, reps, warmup=3)
        row(name, threads, s, backend="eager", batch=b)
        peer_train(name, kind, x_shape, threads, reps)
    return case


PEER_TRAIN = r"""
import json, os, sys, time
name, kind, shape, threads, reps, lr = sys.argv[1], sys.argv[2], [int(v) for v in sys.argv[3].split(",")], int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
os.sched_setaffinity(0, set(range(threads)))
import jax, jax.numpy as jnp
def uniform(key, shape, fan_in):
    bound = 1.0 / fan_in ** 0.5
    return jax.random.uniform(key, shape, jnp.float32, -bound, bound)
keys = iter(jax.random.split(jax.random.PRNGKey(0), 16))
if kind == "mlp":
    dims = [(784, 256), (256, 256), (256, 10)]
    params = [(uniform(next(keys), (o, i), i), uniform(next(keys), (o,), i)) for i, o in dims]
    def forward(p, x):
        (w1, b1), (w2, b2), (w3, b3) = p
        h = jax.nn.relu(x @ w1.T + b1)
        h = jax.nn.relu(h @ w2.T + b2)
        return h @ w3.T + b3
else:
    def conv(x, w, b):
        y = jax.lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=("NCHW", "OIHW", "NCHW"))
        return y + b[None, :, None, None]
    params = [(uniform(next(keys), (8, 1, 3, 3), 9), uniform(next(keys), (8,), 9)),
              (uniform(next(keys), (16, 8, 3, 3), 72), uniform(next(keys), (16,), 72)),
              (uniform(next(keys), (10, 9216), 9216), uniform(next(keys), (10,), 9216))]
    def forward(p, x):
        (c1, d1), (c2, d2), (w, b) = p
        h = jax.nn.relu(conv(x, c1, d1))
        h = jax.nn.relu(conv(h, c2, d2))
        return h.reshape(h.shape[0], -1) @ w.T + b
def loss_fn(p, x, y):
    logp = jax.nn.log_softmax(forward(p, x), axis=1)
    return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))
@jax.jit
def train_step(p, x, y):
    loss, g = jax.value_and_grad(loss_fn)(p, x, y)
    return jax.tree_util.tree_map(lambda a, b: a - lr * b, p, g), loss
x = jax.random.uniform(next(keys), shape, jnp.float32)
y = (jnp.arange(shape[0]) * 7 + 3) % 10
state = [params]
def once():
    p, loss = train_step(state[0], x, y)
    jax.block_until_ready((p, loss))
    state[0] = p
for _ in range(3):
    once()
t = []
for _ in range(reps):
    s = time.perf_counter(); once(); t.append((time.perf_counter() - s) * 1e3)
t.sort()
print(json.dumps({"case": name, "engine": "jax-xla", "threads": threads, "median_ms": round(t[len(t) // 2], 4),
                  "min_ms": round(t[0], 4), "max_ms": round(t[-1], 4), "reps": reps, "backend": "jit",
                  "batch": shape[0], "kernel": jax.__version__}), flush=True)
"""


def peer_train(name, kind, x_shape, threads, reps):
    """The JAX twin (jax.jit of value_and_grad + the SGD update), in a subprocess with the
    thread count set as for the matmul peer (XLA_FLAGS at 1 thread, CPU affinity always)."""
    env = dict(os.environ)
    if threads == 1:
        env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    out = subprocess.run([sys.executable, "-c", PEER_TRAIN, name, kind, ",".join(map(str, x_shape)), str(threads),
                          str(reps), str(LR)], capture_output=True, text=True, env=env)
    if out.returncode == 0:
        sys.stdout.write(out.stdout)
    else:
        print(f"peer jax unavailable: {out.stderr.strip().splitlines()[-1:]}", file=sys.stderr)


def cuda_available(case):
    if torch.cuda.is_available():
        return True
    print(f"{case}: skipped: PyTorch sees no CUDA device", file=sys.stderr)
    return False


def measure_cuda(fn, reps, warmup=2):
    """`measure` with the device drained after each run (the Rust side downloads a result)."""
    def synced():
        fn()
        torch.cuda.synchronize()
    return measure(synced, reps, warmup)


def matmul_cuda(n):
    """`n`^2 f32 torch.mm on the GPU, TF32 off (rows matmul_N_cuda) and allowed (_tf32)."""
    def case(threads, reps):
        if not cuda_available(f"matmul_{n}_cuda"):
            return
        a = torch.randn(n, n, dtype=torch.float32, device="cuda")
        b = torch.randn(n, n, dtype=torch.float32, device="cuda")
        saved = torch.backends.cuda.matmul.allow_tf32
        for tf32 in (False, True):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            s = measure_cuda(lambda: torch.mm(a, b), reps)
            name = f"matmul_{n}_cuda_tf32" if tf32 else f"matmul_{n}_cuda"
            r = {"case": name, "engine": "pytorch-cuda", "threads": threads, **s,
                 "gflops": round(2 * n**3 / (s["median_ms"] * 1e6), 2), "tf32": tf32}
            print(json.dumps(r), flush=True)
        torch.backends.cuda.matmul.allow_tf32 = saved
    return case


def train_case_cuda(name, make_model, x_shape):
    """train_case's SGD step on the GPU (eager PyTorch, TF32 off), synchronized per step."""
    def case(threads, reps):
        if not cuda_available(name):
            return
        torch.backends.cuda.matmul.allow_tf32 = False
        model = make_model().cuda()
        b = x_shape[0]
        x = torch.rand(*x_shape, device="cuda")
        y = ((torch.arange(b) * 7 + 3) % 10).cuda()
        opt = torch.optim.SGD(model.parameters(), lr=LR)

        def step():
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()

        s = measure_cuda(step, reps, warmup=3)
        r = {"case": name, "engine": "pytorch-cuda", "threads": threads, **s, "backend": "eager",
             "batch": b}
        print(json.dumps(r), flush=True)
    return case


def gpt_train_step(threads, reps):
    """One AdamW step of the default GPT (gpt_twin.py's nanoGPT model: 4 layers, 4 heads, 128
    wide, block 64, vocabulary 77) on a fixed batch of 12: forward, loss, backward, clipping at
    1.0, AdamW (betas 0.9/0.99, decay 0.1 on weights), as `torchlean train gpt` steps."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gpt_twin import GPT
    torch.manual_seed(1337)
    model = GPT(77, 64, 4, 4, 128, 0.0)
    params = list(model.parameters())
    opt = torch.optim.AdamW([
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ], lr=1e-3, betas=(0.9, 0.99))
    ids = torch.randint(77, (12, 64))
    targets = torch.randint(77, (12, 64))

    def step():
        loss = model(ids, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    s = measure(step, reps, warmup=3)
    row("gpt_train_step", threads, s, backend="eager", batch=12)


RESNET18 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../target/bench/resnet18.onnx")


def resnet18_forward(threads, reps):
    """torchvision's ResNet-18 forward at batch 1, 224×224, f32: onnxruntime on the ONNX file the
    Rust side imports (export_resnet18.py writes it when absent), and PyTorch eager on the same
    model under no_grad."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import numpy as np
    if not os.path.exists(RESNET18):
        # torchvision's export, else the same network built with onnx and numpy alone
        if torch is not None:
            from export_resnet18 import export
            export(RESNET18)
        else:
            build = os.path.join(os.path.dirname(os.path.abspath(__file__)), "build_resnet18.py")
            subprocess.run([sys.executable, build, RESNET18], check=True)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    try:
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(RESNET18, so, providers=["CPUExecutionProvider"])
        s = measure(lambda: sess.run(None, {"input": x}), reps, warmup=3)
        print(json.dumps({"case": "resnet18_forward", "engine": "onnxruntime", "threads": threads, **s}),
              flush=True)
    except ImportError:
        print("resnet18_forward: onnxruntime is not installed; skipped its row", file=sys.stderr)
    if torch is None:
        print("resnet18_forward: torch is not installed; skipped PyTorch's row", file=sys.stderr)
        return
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    xt = torch.from_numpy(x)
    with torch.no_grad():
        s = measure(lambda: model(xt), reps, warmup=3)
    row("resnet18_forward", threads, s, backend="eager")


CASES = {
    "tape_overhead": tape_overhead,
    "relu_chain": relu_chain,
    "matmul_1024": matmul(1024),
    "matmul_2048": matmul(2048),
    "deep_backward_memory": deep_backward_memory,
    "mlp_train_b64": train_case("mlp_train_b64", mlp_model, (64, 784), "mlp"),
    "mlp_train_b512": train_case("mlp_train_b512", mlp_model, (512, 784), "mlp"),
    "conv_train": train_case("conv_train", conv_model, (32, 1, 28, 28), "conv"),
    "gpt_train_step": gpt_train_step,
    "resnet18_forward": resnet18_forward,
    "matmul_8192_cuda": matmul_cuda(8192),
    "mlp_train_b512_cuda": train_case_cuda("mlp_train_b512_cuda", mlp_model, (512, 784)),
}

# the cases with a row that needs no torch
WITHOUT_TORCH = {"resnet18_forward"}


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
        if torch is not None:
            torch.set_num_threads(t)
        for c in a.cases.split(","):
            if c not in CASES:
                continue
            if torch is None and c not in WITHOUT_TORCH:
                print(f"{c}: torch is not installed; skipped", file=sys.stderr)
                continue
            CASES[c](t, a.reps)


if __name__ == "__main__":
    main()

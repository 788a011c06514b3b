#!/usr/bin/env bash
# The CUDA engine's check on a machine with a GPU (issue 16), in one go, under 8 minutes:
#
#   device    a CUDA driver and at least one device (fails fast, and nothing else runs, without)
#   libs      libnvrtc.so.13 and libcublas.so.13 found (the image, PyTorch's wheels) or installed
#             from PyPI into a virtualenv outside the repository; put on LD_LIBRARY_PATH
#   build     release build of the CLI, xtask and the CUDA tests
#   tests     TORCHLEAN_REQUIRE_CUDA=1 cargo test --release -p torchlean-engine-cuda (the engine
#             suite on the GPU and on the emulation, the NVRTC test), and the train crate's
#             CUDA tests (live device buffers constant over 100 training steps)
#   conform   torchlean conform tests/cases --engine cuda
#   equiv     cargo xtask check-equivalence --engine cuda --cases 20
#   train     torchlean train mlp --engine cuda against --engine cpu, 100 steps: every step's
#             loss within TRAIN_RTOL (relative) of the CPU engine's f32 loss
#   bench     cargo xtask bench --compare: matmul_8192_cuda (TF32 off and on) and
#             mlp_train_b512_cuda beside PyTorch CUDA from the same run
#
# Progress lines are stamped with the time; with $OUT set the whole log goes to
# $OUT/gpu-check.log as well. A failed step does not stop the others (except `device`); the
# table at the end shows every step, and the exit code is 1 if any failed.
#
#   scripts/gpu-check.sh                      # from anywhere; TORCHLEAN_PYTHON: a python with torch
#
# On a GPU machine without cargo or a registry (the lent H200), build here with
# `scripts/gpu-prebuild.sh` (into .gpu-bin), carry that folder, and set
# TORCHLEAN_GPU_PREBUILT=.gpu-bin there: `build` then checks the prebuilt executables instead of
# building, and `tests` runs the test executables its manifest lists.
# shellcheck disable=SC2329 # the step functions are run by name, through `step`
set -euo pipefail
cd "$(dirname "$0")/.."

TRAIN_STEPS=100
# Both engines compute in f32, with sums in other orders, and SGD with momentum amplifies the
# difference (the emulation against the CPU engine: worst 3.0e-6 relative over 100 steps); a
# wrong kernel or a lost update is off by far more.
TRAIN_RTOL=1e-4
PYTHON="${TORCHLEAN_PYTHON:-python3}"
NVRTC_VENV="${TORCHLEAN_NVRTC_VENV:-$HOME/.venvs/torchlean-nvrtc}"
PREBUILT="${TORCHLEAN_GPU_PREBUILT:-}"
if [ -n "$PREBUILT" ]; then
    PREBUILT="$(realpath "$PREBUILT")"
fi
BIN="${PREBUILT:-target/release}"
export TORCHLEAN_REQUIRE_CUDA=1 TORCHLEAN_REQUIRE_NVRTC=1

work="$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")"
trap 'rm -rf "$work"' EXIT
if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT"
    exec > >(tee -a "$OUT/gpu-check.log") 2>&1
fi

say() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }

STEPS=(device libs build tests conform equiv train bench)
declare -A STATUS=()
ROWS=()        # "case|ours|pytorch|ratio" from the benchmarks
failed=0

# Every step's limit is also cut to what is left of the whole run's (under 8 minutes). A step
# runs in its own process group, which `timeout` ends whole (cargo's children included).
DEADLINE=$((SECONDS + 465))

# step NAME SECONDS FUNCTION: runs FUNCTION (exported) in a child bash under a time limit,
# with `set -euo pipefail` there, and records ok / FAIL.
step() {
    local name="$1" limit="$2" fn="$3" t0=$SECONDS rc=0
    local left=$((DEADLINE - SECONDS))
    if [ "$left" -lt "$limit" ]; then
        limit="$left"
    fi
    if [ "$limit" -le 0 ]; then
        STATUS[$name]="FAIL (no time left)"
        failed=1
        say "$name: not run, the 8 minutes are spent"
        return 0
    fi
    say "== $name (limit ${limit}s)"
    timeout -k 10 "$limit" bash -c "set -euo pipefail; $fn" || rc=$?
    if [ "$rc" -eq 0 ]; then
        STATUS[$name]="ok ($((SECONDS - t0)) s)"
    else
        [ "$rc" -eq 124 ] && say "$name: ran past ${limit}s"
        STATUS[$name]="FAIL (exit $rc, $((SECONDS - t0)) s)"
        failed=1
    fi
    say "$name: ${STATUS[$name]}"
}

table() {
    echo
    say "summary"
    printf '%-34s %-22s %14s %14s %7s\n' "step / case" "status" "ours" "PyTorch" "ratio"
    local s
    for s in "${STEPS[@]}"; do
        printf '%-34s %-22s\n' "$s" "${STATUS[$s]:-not run}"
    done
    local r case ours theirs ratio
    for r in "${ROWS[@]}"; do
        IFS='|' read -r case ours theirs ratio <<<"$r"
        printf '%-34s %-22s %14s %14s %7s\n' "  $case" "" "$ours" "$theirs" "$ratio"
    done
    echo "ratio: PyTorch's time / ours (matmul: our GFLOP/s / PyTorch's; target >= 0.95;"
    echo "       mlp_train_b512_cuda: target >= 0.83, i.e. a step <= 1.2x PyTorch eager's)"
}

export PYTHON NVRTC_VENV PREBUILT BIN TRAIN_STEPS TRAIN_RTOL work

check_device() {
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi -L || true
    fi
    local py="$PYTHON"
    command -v "$py" >/dev/null || py=python3
    "$py" - <<'EOF'
import ctypes, sys
try:
    lib = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    sys.exit(f"no CUDA device: the driver library libcuda.so.1 could not be loaded ({e})")
if lib.cuInit(0) != 0:
    sys.exit("no CUDA device: cuInit failed")
n = ctypes.c_int(0)
if lib.cuDeviceGetCount(ctypes.byref(n)) != 0 or n.value < 1:
    sys.exit("no CUDA device: the driver reports none")
print(f"{n.value} CUDA device(s)")
EOF
}

# The directory holding library $1 (e.g. libnvrtc.so.13): the loader's cache, the CUDA
# toolkit, PyTorch's and the NVRTC virtualenv's nvidia wheels.
find_lib() {
    local name="$1" d
    d="$({ ldconfig -p || /sbin/ldconfig -p; } 2>/dev/null | awk -v n="$name" '$1 == n {print $NF}' | head -n 1 || true)"
    if [ -n "$d" ]; then
        dirname "$d"
        return 0
    fi
    local sites
    sites="$("$PYTHON" -c 'import site, sys; print(" ".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null || true)"
    # shellcheck disable=SC2086 # $sites is a list of directories
    for d in /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib /usr/lib/x86_64-linux-gnu \
        $sites "$NVRTC_VENV"/lib/python3*/site-packages; do
        [ -d "$d" ] || continue
        local hit
        hit="$(find "$d" -maxdepth 4 -name "$name" -print -quit 2>/dev/null)"
        if [ -n "$hit" ]; then
            dirname "$hit"
            return 0
        fi
    done
    return 1
}

# Finds $1 or pip-installs PyPI package $2 into the NVRTC virtualenv; prints its directory.
lib_dir() {
    local name="$1" package="$2" d
    if d="$(find_lib "$name")"; then
        echo "$d"
        return 0
    fi
    say "$name not found: pip install $package into $NVRTC_VENV" >&2
    [ -x "$NVRTC_VENV/bin/pip" ] || python3 -m venv "$NVRTC_VENV" >&2
    "$NVRTC_VENV/bin/pip" install --quiet "$package" >&2
    find_lib "$name"
}

libs() {
    local nvrtc cublas
    nvrtc="$(lib_dir libnvrtc.so.13 'nvidia-cuda-nvrtc==13.*')"
    cublas="$(lib_dir libcublas.so.13 'nvidia-cublas==13.*')"
    say "libnvrtc.so.13 in $nvrtc; libcublas.so.13 in $cublas"
    echo "$nvrtc:$cublas" >"$work/ld_path"
}

build() {
    if [ -n "$PREBUILT" ]; then
        prebuilt
        return
    fi
    cargo build --release --locked -p torchlean-cli -p xtask
    cargo test --release --locked -p torchlean-engine-cuda -p torchlean-train --no-run
}

# Checks the executables scripts/gpu-prebuild.sh left in $PREBUILT, and links the checkout path
# baked into them (CARGO_MANIFEST_DIR) to this repository when that path is missing here.
prebuilt() {
    local f root
    for f in torchlean xtask manifest source-root commit; do
        [ -e "$PREBUILT/$f" ] || { echo "$PREBUILT/$f is missing: run scripts/gpu-prebuild.sh"; return 1; }
    done
    while read -r _ _ f; do
        [ -x "$PREBUILT/$f" ] || { echo "$PREBUILT/$f is missing"; return 1; }
    done <"$PREBUILT/manifest"
    root="$(cat "$PREBUILT/source-root")"
    if [ ! -e "$root" ]; then
        mkdir -p "$(dirname "$root")"
        ln -s "$PWD" "$root"
        say "linked $root (the path built into the executables) to $PWD"
    fi
    say "prebuilt at commit $(cat "$PREBUILT/commit"): $(wc -l <"$PREBUILT/manifest") test executables"
}

# Train's CUDA tests are the `cuda::` module of its integration tests, and all of cuda_memory.
test_filter() {
    case "$1" in
    train/integration) echo "cuda::" ;;
    esac
}

tests() {
    if [ -z "$PREBUILT" ]; then
        cargo test --release --locked -p torchlean-engine-cuda
        cargo test --release --locked -p torchlean-train --test integration cuda::
        cargo test --release --locked -p torchlean-train --test cuda_memory
        return
    fi
    local dir target file filter exe
    while read -r dir target file; do
        exe="$PREBUILT/$file"
        filter="$(test_filter "$(basename "$dir")/$target")"
        say "$file ${filter:+(filter $filter)}"
        (cd "$dir" && "$exe" ${filter:+"$filter"})
    done <"$PREBUILT/manifest"
}

conform() {
    "$BIN"/torchlean conform tests/cases --engine cuda
}

equiv() {
    "$BIN"/xtask check-equivalence --engine cuda --cases 20
}

train() {
    local args=(train mlp --steps "$TRAIN_STEPS" --json --log-every 1)
    "$BIN"/torchlean "${args[@]}" --engine cuda >"$work/cuda.jsonl"
    "$BIN"/torchlean "${args[@]}" --engine cpu >"$work/cpu.jsonl"
    python3 - "$work/cuda.jsonl" "$work/cpu.jsonl" "$TRAIN_RTOL" "$TRAIN_STEPS" <<'EOF'
import json, sys
def losses(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    return [r["loss"] for r in rows if r.get("event") == "step"]
cuda, cpu, rtol, steps = losses(sys.argv[1]), losses(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
assert len(cuda) == len(cpu) == steps, (len(cuda), len(cpu))
worst = max((abs(a - b) / abs(b), k + 1) for k, (a, b) in enumerate(zip(cuda, cpu)))
print(f"losses {cuda[0]:.6f} -> {cuda[-1]:.6f} (cpu {cpu[0]:.6f} -> {cpu[-1]:.6f}); "
      f"worst relative difference {worst[0]:.2e} at step {worst[1]} (tolerance {rtol:g})")
sys.exit(0 if worst[0] <= rtol else 1)
EOF
}

bench() {
    TORCHLEAN_PYTHON="$PYTHON" "$BIN"/xtask bench --json --compare --reps 7 \
        --case matmul_8192_cuda --case mlp_train_b512_cuda | tee "$work/bench.jsonl"
}

export -f say check_device find_lib lib_dir libs build prebuilt test_filter tests conform equiv train bench
step device 15 check_device
if [[ "${STATUS[device]}" != ok* ]]; then
    say "no CUDA device: nothing else can run here"
    table
    exit 1
fi
step libs 45 libs
if [ -s "$work/ld_path" ]; then
    LD_LIBRARY_PATH="$(cat "$work/ld_path")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LD_LIBRARY_PATH
fi
step build 200 build
step tests 120 tests
step conform 30 conform
step equiv 30 equiv
step train 40 train
step bench 120 bench

# the benchmark table: our rows and PyTorch's from the same run
if [ -s "$work/bench.jsonl" ]; then
    while IFS= read -r line; do
        ROWS+=("$line")
    done < <(python3 - "$work/bench.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
rate = {}
for r in rows:
    if "gflops" in r:
        rate[(r["case"], r["engine"])] = r["gflops"]
for c in (r for r in rows if "compare" in r):
    case = c["compare"] + (f"/{c['backend']}" if c.get("backend") else "")
    if not c["peer"].startswith("pytorch"):
        case += f" vs {c['peer']}"
    mine, theirs = rate.get((c["compare"], c["engine"])), rate.get((c["compare"], c["peer"]))
    if mine is not None and theirs is not None:
        ours, peer = f"{mine:.0f} GF/s", f"{theirs:.0f} GF/s"
    else:
        ours, peer = f"{c['ours_ms']:.3f} ms", f"{c['peer_ms']:.3f} ms"
    print(f"{case}|{ours}|{peer}|{c['ratio']:.2f}")
EOF
    )
fi
table
exit "$failed"

#!/usr/bin/env bash
# Builds, on this machine, everything `scripts/gpu-check.sh` runs, for a GPU machine that has
# no Rust toolchain and no package registry (the lent H200 here): the release CLI, xtask and
# the CUDA test executables, stripped, into one folder with a manifest.
#
#   scripts/gpu-prebuild.sh [DIR]       # DIR defaults to .gpu-bin (ignored by git)
#
# Then, on the GPU machine, from the repository root (DIR.tgz, DIR packed, travels with the
# working tree: DIR itself is too large beside the checkout for the lent machines' 64 MiB):
#
#   tar xzf .gpu-bin.tgz && TORCHLEAN_GPU_PREBUILT=.gpu-bin TORCHLEAN_PYTHON=python3 scripts/gpu-check.sh
#
# The executables were built with this checkout's absolute path baked in (tests find their
# fixtures through CARGO_MANIFEST_DIR); DIR/source-root records it, and gpu-check.sh links
# that path to the repository root there when it does not exist.
#
# DIR/manifest: one line per test executable, "PACKAGE_DIR TARGET FILE" (PACKAGE_DIR relative
# to the repository root: cargo runs a test executable from its package's folder, and so do we).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-.gpu-bin}"

cargo build --release --locked -p torchlean-cli -p xtask
listing="$(mktemp)"
trap 'rm -f "$listing"' EXIT
cargo test --release --locked -p torchlean-engine-cuda -p torchlean-train --no-run \
    --message-format=json >"$listing"

rm -rf "$dir"
mkdir -p "$dir"
pwd >"$dir/source-root"
git rev-parse HEAD >"$dir/commit"
for bin in torchlean xtask; do
    strip -o "$dir/$bin" "target/release/$bin"
done
# Every test executable of engine-cuda, and train's two that hold its CUDA tests.
python3 - "$PWD" "$dir" "$listing" <<'PY'
import json, os, subprocess, sys
root, out, listing = sys.argv[1:]
wanted = {"torchlean-engine-cuda": None, "torchlean-train": {"integration", "cuda_memory"}}
lines = []
for line in open(listing):
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
        continue
    package = m["package_id"].split("#")[-1].split("@")[0]
    target = m["target"]["name"]
    if package not in wanted or (wanted[package] and target not in wanted[package]):
        continue
    pkg_dir = os.path.relpath(os.path.dirname(m["manifest_path"]), root)
    file = f"test-{package.removeprefix('torchlean-')}-{target}"
    subprocess.run(["strip", "-o", os.path.join(out, file), m["executable"]], check=True)
    lines.append(f"{pkg_dir} {target} {file}")
if not lines:
    sys.exit("gpu-prebuild: cargo listed no CUDA test executables")
open(os.path.join(out, "manifest"), "w").write("\n".join(sorted(lines)) + "\n")
print("\n".join(sorted(lines)))
PY
du -sh "$dir"
# The executables are about 60 MB, which with the checkout is over what a lent machine takes
# (64 MiB); compressed they are about 21 MB. DIR.tgz is ignored by git like DIR.
tar czf "$dir.tgz" "$dir"
du -sh "$dir.tgz"
echo "carry $dir.tgz; on the GPU machine: tar xzf $dir.tgz && TORCHLEAN_GPU_PREBUILT=$dir TORCHLEAN_PYTHON=python3 scripts/gpu-check.sh"

#!/usr/bin/env bash
# The fault matrix: which claim of `cargo xtask check-equivalence` catches each hand-made fault.
#
#   scripts/fault-matrix.sh [--cases N] [--profile release|test] [PATCH...]
#
# Each fault is a one- or two-line patch in crates/equiv/faults/ (its first line, `# …`, says
# what it breaks). For each patch, in a scratch git worktree at this tree's HEAD (never in this
# tree): reset the worktree, apply the patch, run `cargo xtask check-equivalence --cases N
# --json --shrink-steps 0` (`--profile release`, the default, is `cargo xtask` as CI runs it;
# `--profile test` builds without LTO at opt-level 1, much faster to rebuild on a loaded
# machine, and checks the same arithmetic), and record the claims with failing rows. A patch
# whose description starts with EQUIVALENT is expected to pass. Prints a Markdown table and
# exits 1 if a non-equivalent fault was not caught (or an equivalent one was), 2 on a setup
# error. One fault at a time, under `nice -n 10`; takes a while (a release rebuild per fault).
#
# Environment: FAULT_MATRIX_DIR (scratch directory, default target/fault-matrix). The scratch
# worktree's target starts as hard links of this tree's target/<dir>/{deps,build,.fingerprint}
# (cargo writes new files, never into the linked ones), so registry dependencies are not rebuilt.
set -euo pipefail
root="$(git rev-parse --show-toplevel)"
cd "$root"
cases=100
profile=release
patches=()
while [ $# -gt 0 ]; do
    case "$1" in
        --cases) cases="$2"; shift 2 ;;
        --profile) profile="$2"; shift 2 ;;
        -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
        *) patches+=("$1"); shift ;;
    esac
done
if [ ${#patches[@]} -eq 0 ]; then
    patches=(crates/equiv/faults/*.patch)
fi
scratch="${FAULT_MATRIX_DIR:-$root/target/fault-matrix}"
tree="$scratch/tree"
mkdir -p "$scratch"
if [ ! -e "$tree/.git" ]; then
    git worktree add --detach "$tree" HEAD >/dev/null
else
    git -C "$tree" checkout --detach --quiet --force "$(git rev-parse HEAD)"
fi
case "$profile" in
    release) dir=release ;;
    test) dir=debug ;;
    *) echo "fault-matrix: --profile release or test, not $profile" >&2; exit 2 ;;
esac
if [ ! -d "$tree/target/$dir" ] && [ -d "$root/target/$dir" ]; then
    mkdir -p "$tree/target/$dir"
    for d in deps build .fingerprint; do
        [ -d "$root/target/$dir/$d" ] && cp -al "$root/target/$dir/$d" "$tree/target/$dir/$d"
    done
fi
# the patches are read from this tree (they may be newer than HEAD's)
abs=()
for p in "${patches[@]}"; do abs+=("$(cd "$(dirname "$p")" && pwd)/$(basename "$p")"); done

status=0
rows=()
for p in "${abs[@]}"; do
    name="$(basename "$p" .patch)"
    desc="$(head -n 1 "$p" | sed 's/^# *//')"
    git -C "$tree" checkout --quiet --force HEAD -- .
    git -C "$tree" clean --quiet -fd -- crates xtask
    if ! git -C "$tree" apply "$p"; then
        echo "fault-matrix: $name does not apply to HEAD" >&2
        exit 2
    fi
    log="$scratch/$name.jsonl"
    start=$(date +%s)
    set +e
    (cd "$tree" && nice -n 10 cargo run --quiet --profile "$profile" --package xtask -- \
        check-equivalence --cases "$cases" --json --shrink-steps 0 \
        --out "$scratch/counterexamples-$name") >"$log" 2>"$scratch/$name.stderr"
    rc=$?
    set -e
    secs=$(( $(date +%s) - start ))
    caught="$(python3 - "$log" <<'EOF'
import json, sys
claims = {}
for line in open(sys.argv[1]):
    line = line.strip()
    if not line.startswith('{'):
        continue
    o = json.loads(line)
    if 'claim' in o and 'engine' in o and o.get('pass') is False:
        claims.setdefault(o['claim'], set()).add(o['engine'])
print('; '.join(f"{c} ({', '.join(sorted(e))})" for c, e in sorted(claims.items())))
EOF
)"
    case "$rc" in
        0) verdict="not caught" ;;
        1) verdict="caught" ;;
        *) verdict="error (exit $rc, see $scratch/$name.stderr)" ;;
    esac
    if [[ "$desc" == EQUIVALENT* ]]; then
        [ "$rc" = 0 ] && verdict="not caught (expected: equivalent)" || status=1
    elif [ "$rc" != 1 ]; then
        status=1
    fi
    rows+=("| \`$name\` | $desc | $verdict | ${caught:-—} | ${secs} s |")
    echo "fault-matrix: $name: $verdict${caught:+ by $caught} (${secs} s)" >&2
done
git -C "$tree" checkout --quiet --force HEAD -- .
echo "| fault | what it breaks | verdict at --cases $cases | claims that failed (engines) | build + run ($profile) |"
echo "| --- | --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
exit "$status"

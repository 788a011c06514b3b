#!/usr/bin/env python3
"""Runs README.md's tour as a newcomer pastes it, in a fresh copy of this checkout (issue 34).

The tour is every ```sh block between the lines `<!-- tour -->` and `<!-- /tour -->`. Each
command (backslash continuations joined) runs in bash with `set -o pipefail`, one after another
in one scratch folder, and must exit 0, or with the status its trailing comment announces
(`# exit 1: ...`). A command's `alias NAME=...` line applies to the commands after it. Files
come from the checkout as a fresh clone would have them: tracked and untracked-but-not-ignored
files, nothing the build or earlier runs left behind.

    scripts/readme-tour.py                   # as pasted: `cargo run --release` into ./target
    scripts/readme-tour.py --bin target/debug  # what CI does: the executables `cargo test` built

With --bin DIR the tour's `torchlean` alias and `cargo xtask` run DIR/torchlean and DIR/xtask
instead of building in release (the same code, another optimisation level). Prints each command
with its time and exit status; exit 1 at the first command that does not do what the README
says, naming it, its line and the end of its output.
"""

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXIT_NOTE = re.compile(r"#\s*exit (\d+)\b")
ALIAS = re.compile(r"^alias (\w+)='([^']*)'$")


def tour_commands(readme):
    """(line number, command, expected exit status) for every command of the tour's blocks."""
    commands, in_tour, in_block, pending, start = [], False, False, "", 0
    for number, line in enumerate(open(readme, encoding="utf-8"), 1):
        line = line.rstrip("\n")
        if line.strip() == "<!-- tour -->":
            in_tour = True
        elif line.strip() == "<!-- /tour -->":
            in_tour = False
        elif in_tour and line.startswith("```"):
            in_block = line.strip() == "```sh" and not in_block
        elif in_tour and in_block:
            if not pending:
                start = number
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            command = (pending + line).strip()
            pending = ""
            if command and not command.startswith("#"):
                note = EXIT_NOTE.search(command)
                commands.append((start, command, int(note.group(1)) if note else 0))
    if in_tour or not commands:
        sys.exit(f"readme-tour: {readme} has no closed <!-- tour --> ... <!-- /tour --> section with commands")
    return commands


def fresh_copy(dest):
    """The checkout's files as a clone of it would have them (uncommitted edits included)."""
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, check=True, capture_output=True,
    ).stdout.decode().split("\0")
    for path in filter(None, listing):
        src = os.path.join(ROOT, path)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(dest, path)), exist_ok=True)
            shutil.copy2(src, os.path.join(dest, path))


def prelude(aliases, bin_dir):
    lines = ["set -o pipefail", "shopt -s expand_aliases"]
    for name, value in aliases.items():
        if bin_dir and name == "torchlean":
            lines.append(f'torchlean() {{ {shlex.quote(os.path.join(bin_dir, "torchlean"))} "$@"; }}')
        else:
            lines.append(f"alias {name}={shlex.quote(value)}")
    if bin_dir:
        xtask = shlex.quote(os.path.join(bin_dir, "xtask"))
        lines.append(f'cargo() {{ if [ "$1" = xtask ]; then shift; {xtask} "$@"; else command cargo "$@"; fi; }}')
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", help="run DIR/torchlean and DIR/xtask instead of cargo run --release")
    parser.add_argument("--readme", default=os.path.join(ROOT, "README.md"))
    args = parser.parse_args()
    bin_dir = os.path.abspath(args.bin) if args.bin else None
    if bin_dir:
        for exe in ("torchlean", "xtask"):
            if not os.access(os.path.join(bin_dir, exe), os.X_OK):
                sys.exit(f"readme-tour: {os.path.join(bin_dir, exe)} is missing: build it first")
    commands, name = tour_commands(args.readme), os.path.basename(args.readme)
    env = dict(os.environ, CARGO_TARGET_DIR=os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")))
    aliases, total = {}, time.monotonic()
    with tempfile.TemporaryDirectory(prefix="readme-tour.") as scratch:
        fresh_copy(scratch)
        runnable = sum(1 for _, c, _ in commands if not ALIAS.match(c))
        print(f"readme-tour: {runnable} commands in a fresh copy at {scratch}", flush=True)
        for line, command, expected in commands:
            alias = ALIAS.match(command)
            if alias:
                aliases[alias.group(1)] = alias.group(2)
                continue
            t0 = time.monotonic()
            run = subprocess.run(
                ["bash", "-c", prelude(aliases, bin_dir) + command],
                cwd=scratch, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            )
            took = time.monotonic() - t0
            status = "ok" if run.returncode == expected else "FAILED"
            print(f"{status:6} {took:6.1f} s  exit {run.returncode}  {name}:{line}  {command}", flush=True)
            if run.returncode != expected:
                tail = run.stdout.decode(errors="replace").splitlines()[-30:]
                print("\n".join("    " + t for t in tail))
                sys.exit(
                    f"readme-tour: {name}:{line} exited {run.returncode}, "
                    f"the README says {expected}: {command}"
                )
    print(f"readme-tour: all {runnable} commands did what the README says, {time.monotonic() - total:.0f} s")


if __name__ == "__main__":
    main()

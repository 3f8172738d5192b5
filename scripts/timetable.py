#!/usr/bin/env python3
"""Where the test suite's time goes: runs `cargo test`, passes its output through unchanged, and
prints a table of every test binary's wall time and the set-up steps' (slowest first) at the end.

    timetable.py --steps FILE --artifacts FILE [--out FILE] -- cargo test ...

--steps      lines of `NAME<TAB>SECONDS`, the set-up steps scripts/test.sh timed before
--artifacts  the JSON lines of `cargo test --no-run --message-format=json`, which say the package
             of every test executable (a binary's own line names only its source file)
--out        also write the table there

A binary's wall time is from cargo's `Running …` (or `Doc-tests …`) line to the next such line,
or to cargo's exit for the last one: the build is done before (test.sh builds with --no-run
first), so that is the binary's run, start-up included. The exit code is cargo's.

Reading stops once cargo has exited and its pipe has been quiet for a moment, so a process a test
left behind that still holds the pipe cannot hold the suite open.
"""

import argparse
import json
import os
import re
import select
import subprocess
import sys
import time

RUNNING = re.compile(r"^\s+Running (.+?) \((\S+)\)\s*$")
DOCTESTS = re.compile(r"^\s+Doc-tests (\S+)\s*$")
RESULT = re.compile(r"^test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored")


def packages(artifacts_path, root):
    """executable path -> the package's folder, relative to the workspace."""
    out = {}
    if not artifacts_path or not os.path.exists(artifacts_path):
        return out
    with open(artifacts_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            exe = msg.get("executable") if isinstance(msg, dict) else None
            if not exe or msg.get("reason") != "compiler-artifact":
                continue
            folder = os.path.relpath(os.path.dirname(msg.get("manifest_path", "")), root)
            out[os.path.realpath(exe)] = folder
    return out


def label(match_src, match_exe, pkgs, root):
    exe = match_exe if os.path.isabs(match_exe) else os.path.join(root, match_exe)
    folder = pkgs.get(os.path.realpath(exe))
    if folder is None:
        # Not in the artifacts: name it by the executable, without its hash.
        folder = re.sub(r"-[0-9a-f]{16}$", "", os.path.basename(match_exe))
    return f"{folder} {match_src}"


def lines_of(proc, exited, quiet_after_exit=2.0):
    """The lines cargo writes, until it has exited and its pipe is quiet. `exited` gets the time
    cargo was first seen gone."""
    fd = proc.stdout.fileno()
    buf = b""
    exited_at = None
    while True:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                yield line + b"\n"
            continue
        if proc.poll() is not None:
            if exited_at is None:
                exited_at = time.monotonic()
                exited.append(exited_at)
            if time.monotonic() - exited_at >= quiet_after_exit:
                break
    if buf:
        yield buf


def fmt_secs(s):
    return f"{int(s // 60)}:{s % 60:04.1f}" if s >= 60 else f"{s:.1f}s"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps")
    p.add_argument("--artifacts")
    p.add_argument("--out")
    p.add_argument("cmd", nargs=argparse.REMAINDER)
    a = p.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd:
        p.error("no command after --")
    root = os.getcwd()
    pkgs = packages(a.artifacts, root)

    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    rows = []  # [label, start, end]
    passed = failed = 0
    out = sys.stdout.buffer
    exited = []
    for raw in lines_of(proc, exited):
        out.write(raw)
        out.flush()
        line = raw.decode("utf-8", errors="replace")
        now = time.monotonic()
        m = RUNNING.match(line)
        d = DOCTESTS.match(line)
        if m or d:
            if rows and rows[-1][2] is None:
                rows[-1][2] = now
            rows.append([label(m.group(1), m.group(2), pkgs, root) if m else f"doc-tests {d.group(1)}", now, None])
            continue
        r = RESULT.match(line)
        if r:
            passed += int(r.group(1))
            failed += int(r.group(2))
    rc = proc.wait()
    end = exited[0] if exited else time.monotonic()
    if rows and rows[-1][2] is None:
        rows[-1][2] = end

    table = [(e - s, name) for name, s, e in rows]
    steps = []
    if a.steps and os.path.exists(a.steps):
        with open(a.steps, encoding="utf-8") as f:
            for line in f:
                name, _, secs = line.rstrip("\n").partition("\t")
                try:
                    steps.append((float(secs), name))
                except ValueError:
                    pass
    steps.append((end - start, "cargo test (every binary below)"))
    total = sum(s for s, _ in steps)

    report = ["", "== where the time went (wall time, slowest first)"]
    report.append(f"{'time':>9}  {'share':>6}  step")
    for secs, name in sorted(steps, key=lambda x: -x[0]):
        report.append(f"{fmt_secs(secs):>9}  {100 * secs / total if total else 0:5.1f}%  {name}")
    report.append(f"{fmt_secs(total):>9}  100.0%  total")
    report.append("")
    report.append(f"{'time':>9}  {'share':>6}  test binary (its package's folder, its source)")
    for secs, name in sorted(table, key=lambda x: -x[0]):
        report.append(f"{fmt_secs(secs):>9}  {100 * secs / total if total else 0:5.1f}%  {name}")
    report.append(f"{len(table)} test binaries and doc-test groups ran; cargo test exited {rc}")
    text = "\n".join(report) + "\n"
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(text)
    out.write(text.encode())
    # The suite's closing line, in the plain form any reader of a run understands.
    out.write(f"suite: {passed} passed, {failed} failed\n".encode())
    out.flush()
    sys.exit(rc)


if __name__ == "__main__":
    main()

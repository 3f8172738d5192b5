#!/usr/bin/env python3
"""Runs the workspace's test binaries a few at a time and prints where the time went.

    run-tests.py --artifacts FILE [--steps FILE] [--out FILE] [--jobs N] [--history FILE]
                 [-- DOC-TEST COMMAND...]

--artifacts  the JSON lines of `cargo test --no-run --message-format=json`: every test executable,
             its package and its source (scripts/test.sh builds them so first)
--steps      lines of `NAME<TAB>SECONDS`, the set-up steps scripts/test.sh timed before
--out        also write the time table there
--jobs       how many test binaries run at once at most (default: $CAPTF_TEST_JOBS, else the CPU
             count + 1)
--history    each binary's wall and CPU time from the last run, read to start the slowest first
             and to keep the CPUs from being oversubscribed, written back at the end (default:
             captf-test-times.json in $CARGO_TARGET_DIR)
after --     a command run as one more job (scripts/test.sh gives `cargo test --doc`)

Why not `cargo test`: it runs one binary at a time, and most of the suite's time is spent waiting
on real processes (API servers, Terraform, kubelets) that leave the CPUs idle. Why not
cargo-nextest: it runs every test in its own process, and the real-control-plane tests share one
control plane per binary, so that would start many more. So this runs each binary as `cargo test`
would (in its package's folder, with cargo's CARGO_MANIFEST_DIR, CARGO_PKG_NAME,
CARGO_PKG_VERSION and CARGO_CRATE_NAME), slowest first by the last run's times (binaries with no
time yet first of all), and prints each binary's whole output when it ends, under cargo's own
`Running …` line, so a log reads as cargo's does.

How many run at once is bounded twice: by --jobs, and by the CPUs. Each binary is expected to
keep as many CPUs busy as it did last time (its CPU time over its wall time, children included;
one CPU when not known), and the next binary starts only while the expected load stays within
the CPU count, or when nothing else runs. So a binary that compiles (the release builds) runs
beside ones that mostly wait on real processes, not beside another compile: two compiles at once
only take turns on the same CPUs.

A binary runs in its own process group; when it exits, whatever it left running in that group is
killed, so a leftover process cannot hold a lane. A binary still running after --timeout seconds
(default 45 minutes) is killed and counted as failed.

At the end: the set-up steps' and every binary's wall time, slowest first, then
`suite: N passed, N failed`. The exit code is 0 when every binary passed, 101 (cargo's) otherwise.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

RESULT = re.compile(r"^test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored", re.M)
PACKAGE_ID = re.compile(r"#(?:([A-Za-z0-9_-]+)@)?([0-9][^#\s]*)$")


class Binary:
    def __init__(self, label, argv, cwd, env):
        self.label = label
        self.argv = argv
        self.cwd = cwd
        self.env = env
        self.header = ""
        self.secs = None
        self.cpu = None
        self.rc = None
        self.passed = 0
        self.failed = 0


def package_of(msg):
    """(name, version) of a compiler-artifact message's package."""
    pid = msg.get("package_id", "")
    m = PACKAGE_ID.search(pid)
    if not m:
        return os.path.basename(os.path.dirname(msg.get("manifest_path", ""))), "0.0.0"
    name = m.group(1) or pid.rsplit("/", 1)[-1].split("#", 1)[0]
    return name, m.group(2)


def binaries(artifacts_path, root):
    out = []
    seen = set()
    with open(artifacts_path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if not isinstance(msg, dict) or msg.get("reason") != "compiler-artifact":
                continue
            exe = msg.get("executable")
            if not exe or not msg.get("profile", {}).get("test") or exe in seen:
                continue
            seen.add(exe)
            target = msg["target"]
            pkg_dir = os.path.dirname(msg["manifest_path"])
            src = os.path.relpath(target["src_path"], pkg_dir)
            src = src if "test" in target["kind"] else f"unittests {src}"
            folder = os.path.relpath(pkg_dir, root)
            name, version = package_of(msg)
            env = dict(
                os.environ,
                CARGO_MANIFEST_DIR=pkg_dir,
                CARGO_PKG_NAME=name,
                CARGO_PKG_VERSION=version,
                CARGO_CRATE_NAME=target["name"].replace("-", "_"),
            )
            b = Binary(f"{folder} {src}", [exe], pkg_dir, env)
            b.header = f"     Running {src} ({exe})"
            out.append(b)
    return out


def kill_group(pgid):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.5)


def wait_with_usage(proc, deadline):
    """The exit code and the CPU seconds of `proc` and the children it waited for, or None for
    both when `deadline` (monotonic) passed first."""
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage.ru_utime + usage.ru_stime
        if time.monotonic() >= deadline:
            return None, None
        time.sleep(0.2)


def run_one(b, timeout, print_lock, out):
    with tempfile.TemporaryFile() as log:
        start = time.monotonic()
        proc = subprocess.Popen(
            b.argv, cwd=b.cwd, env=b.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        b.rc, b.cpu = wait_with_usage(proc, start + timeout)
        timed_out = b.rc is None
        if timed_out:
            kill_group(proc.pid)
            b.rc, b.cpu = wait_with_usage(proc, float("inf"))
        b.secs = time.monotonic() - start
        # Whatever the binary left running in its group.
        kill_group(proc.pid)
        log.seek(0)
        text = log.read().decode("utf-8", errors="replace")
    for m in RESULT.finditer(text):
        b.passed += int(m.group(1))
        b.failed += int(m.group(2))
    if timed_out:
        text += f"\n{b.label}: still running after {timeout:.0f} s, killed\n"
        b.rc = b.rc or 1
    if b.rc != 0 and b.failed == 0:
        # It died before (or without) a result line: count it as one failure.
        b.failed = 1
    with print_lock:
        out.write(f"{b.header}\n{text}".encode())
        if not text.endswith("\n"):
            out.write(b"\n")
        out.write(f"     ({b.label}: {fmt_secs(b.secs)}, {fmt_secs(b.cpu)} CPU, exit {b.rc})\n\n".encode())
        out.flush()


def fmt_secs(s):
    """Seconds as `M:SS.s` from a minute on, else `S.ss`, rounded to a tenth once.

    >>> [fmt_secs(s) for s in (0.04, 59.94, 59.96, 359.96, 1497.93)]
    ['0.0s', '59.9s', '1:00.0', '6:00.0', '24:57.9']
    """
    tenths = round(s * 10)
    if tenths < 600:
        return f"{tenths / 10:.1f}s"
    minutes, rest = divmod(tenths, 600)
    return f"{minutes}:{rest // 10:02d}.{rest % 10}"


def read_history(path):
    """label -> (wall seconds, CPU seconds or None)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return {}
    out = {}
    for k, v in data.items() if isinstance(data, dict) else []:
        try:
            if isinstance(v, dict):
                out[k] = (float(v["wall"]), float(v["cpu"]) if v.get("cpu") is not None else None)
            else:
                out[k] = (float(v), None)
        except (KeyError, TypeError, ValueError):
            continue
    return out


def write_history(path, history, ran):
    merged = {k: {"wall": w, "cpu": c} for k, (w, c) in history.items()}
    merged.update(
        {b.label: {"wall": round(b.secs, 1), "cpu": round(b.cpu, 1)} for b in ran if b.secs is not None}
    )
    tmp = f"{path}.{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(merged, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError as e:
        print(f"run-tests: could not keep the times in {path}: {e}", file=sys.stderr)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--artifacts", required=True)
    p.add_argument("--steps")
    p.add_argument("--out")
    cpus = os.cpu_count() or 1
    p.add_argument("--jobs", type=int, default=int(os.environ.get("CAPTF_TEST_JOBS") or cpus + 1))
    target_dir = os.environ.get("CARGO_TARGET_DIR") or "target"
    p.add_argument("--history", default=os.path.join(target_dir, "captf-test-times.json"))
    p.add_argument("--timeout", type=float, default=45 * 60)
    p.add_argument("doc", nargs=argparse.REMAINDER)
    a = p.parse_args()
    doc = a.doc[1:] if a.doc and a.doc[0] == "--" else a.doc
    root = os.getcwd()

    todo = binaries(a.artifacts, root)
    if not todo:
        sys.exit(f"run-tests: no test executables in {a.artifacts}")
    if doc:
        d = Binary("doc-tests (every crate)", doc, root, dict(os.environ))
        d.header = f"     Doc-tests ({' '.join(doc)})"
        todo.append(d)
    history = read_history(a.history)
    # Slowest first; a binary with no time yet before all others (it may be the slowest).
    order = sorted(range(len(todo)), key=lambda i: (-history.get(todo[i].label, (float("inf"), None))[0], i))
    queue = [todo[i] for i in order]
    jobs = max(1, a.jobs)

    def load(b):
        """The CPUs `b` is expected to keep busy: as last time, else one."""
        wall, cpu = history.get(b.label, (None, None))
        if not wall or cpu is None:
            return 1.0
        return min(float(cpus), max(0.05, cpu / wall))

    print(f"== {len(todo)} test binaries, at most {jobs} at a time within {cpus} CPUs, slowest first", flush=True)
    out = sys.stdout.buffer
    print_lock = threading.Lock()
    changed = threading.Condition()
    running = {}  # Binary -> expected load

    def pick():
        """The first queued binary that fits beside the running ones (any, when none runs)."""
        if len(running) >= jobs:
            return None
        busy = sum(running.values())
        for i, b in enumerate(queue):
            if not running or busy + load(b) <= cpus + 0.25:
                return queue.pop(i)
        return None

    def lane(b):
        try:
            run_one(b, a.timeout, print_lock, out)
        finally:
            with changed:
                del running[b]
                changed.notify_all()

    start = time.monotonic()
    threads = []
    with changed:
        while queue or running:
            b = pick() if queue else None
            if b is None:
                changed.wait()
                continue
            running[b] = load(b)
            t = threading.Thread(target=lane, args=(b,))
            threads.append(t)
            t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - start
    write_history(a.history, history, todo)

    steps = []
    if a.steps and os.path.exists(a.steps):
        with open(a.steps, encoding="utf-8") as f:
            for line in f:
                name, _, secs = line.rstrip("\n").partition("\t")
                try:
                    steps.append((float(secs), name))
                except ValueError:
                    pass
    steps.append((wall, "tests (binaries side by side; each one's own time below)"))
    total = sum(s for s, _ in steps)
    busy = sum(b.secs for b in todo)
    cpu_total = sum(b.cpu or 0 for b in todo)

    report = ["", "== where the time went (wall time, slowest first)"]
    report.append(f"{'time':>9}  {'share':>6}  step")
    for secs, name in sorted(steps, key=lambda x: -x[0]):
        report.append(f"{fmt_secs(secs):>9}  {100 * secs / total if total else 0:5.1f}%  {name}")
    report.append(f"{fmt_secs(total):>9}  100.0%  total")
    report.append("")
    report.append(
        f"{'time':>9}  {'share':>6}  {'CPU':>9}  test binary (its package's folder, its source); "
        f"share of {fmt_secs(busy)} run one after another"
    )
    for b in sorted(todo, key=lambda b: -b.secs):
        mark = "" if b.rc == 0 else f"  FAILED (exit {b.rc})"
        report.append(
            f"{fmt_secs(b.secs):>9}  {100 * b.secs / busy if busy else 0:5.1f}%  {fmt_secs(b.cpu or 0):>9}  {b.label}{mark}"
        )
    failed_bins = [b for b in todo if b.rc != 0]
    report.append(
        f"{len(todo)} test binaries ran in {fmt_secs(wall)} ({fmt_secs(busy)} one after another, "
        f"{fmt_secs(cpu_total)} CPU), {len(failed_bins)} failed"
    )
    text = "\n".join(report) + "\n"
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(text)
    out.write(text.encode())
    passed = sum(b.passed for b in todo)
    failed = sum(b.failed for b in todo)
    out.write(f"suite: {passed} passed, {failed} failed\n".encode())
    out.flush()
    sys.exit(0 if not failed_bins else 101)


if __name__ == "__main__":
    main()

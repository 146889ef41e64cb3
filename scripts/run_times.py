"""Prints the run-times table of one `bash scripts/test.sh` run, as Markdown: each phase's wall-clock
time (from the phase marks test.sh wrote) and each test binary's own time and counts (from cargo's
log), under the commit, date and core count it ran on. test.sh writes it to target/test-times.md;
docs/testing.md quotes such a table verbatim.

Usage: run_times.py PHASES_FILE CARGO_LOG
"""
import datetime
import os
import re
import subprocess
import sys


def minutes(seconds):
    seconds = round(seconds)
    return f"{seconds // 60} min {seconds % 60:02d} s"


def phases(path):
    marks = []
    for line in open(path):
        _, name, at = line.rstrip("\n").split("\t")
        marks.append((name, int(at)))
    return [(name, at - before) for (_, before), (name, at) in zip(marks, marks[1:])]


RUNNING = re.compile(r"^\s+(Running|Doc-tests) (?:unittests )?(\S+)(?: \(target/\S+/deps/(\w+?)-[0-9a-f]+\))?")
RESULT = re.compile(r"^test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored;.* finished in ([\d.]+)s")


def binaries(path):
    out, current = [], None
    for line in open(path, errors="replace"):
        running = RUNNING.match(line)
        if running:
            kind, path, artifact = running.groups()
            current = f"doc-tests {path}" if kind == "Doc-tests" else f"{path} ({artifact})" if artifact else path
            continue
        result = RESULT.match(line)
        if result and current:
            passed, failed, skipped, secs = result.groups()
            out.append((current, int(passed), int(failed), int(skipped), float(secs)))
            current = None
    return out


def main():
    phase_times = phases(sys.argv[1])
    runs = binaries(sys.argv[2])
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True).stdout.strip()
    today = datetime.date.today().isoformat()
    print(f"`bash scripts/test.sh` at commit {commit}{' (with local changes)' if dirty else ''}, {today}, "
          f"{os.cpu_count()} cores:")
    print()
    print("| phase | wall clock |")
    print("|---|---|")
    for name, secs in phase_times:
        print(f"| {name} | {minutes(secs)} |")
    print(f"| **total** | **{minutes(sum(s for _, s in phase_times))}** |")
    print()
    print("| test binary (slowest first) | passed | failed | skipped | its own time |")
    print("|---|---|---|---|---|")
    for name, passed, failed, skipped, secs in sorted(runs, key=lambda r: -r[4]):
        if passed + failed + skipped:
            print(f"| `{name}` | {passed} | {failed} | {skipped} | {minutes(secs)} |")


if __name__ == "__main__":
    main()

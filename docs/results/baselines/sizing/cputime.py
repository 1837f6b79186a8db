"""Runs a command and samples its CPU seconds (user + system, all threads, from
/proc/<pid>/stat) and the wall clock whenever its training log gains a line (polled every
0.1 s), into OUT.json; the command's stderr goes to OUT.json.console.

    python cputime.py LOG OUT.json -- command ...
"""

import json
import os
import subprocess
import sys
import time

log, out = sys.argv[1], sys.argv[2]
cmd = sys.argv[sys.argv.index("--") + 1:]
tick = os.sysconf("SC_CLK_TCK")
with open(out + ".console", "w") as console:
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=console)


def cpu_seconds():
    fields = open(f"/proc/{child.pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / tick


seen, rows = 0, []
while child.poll() is None:
    try:
        lines = open(log).read().splitlines()
    except OSError:
        lines = []
    if len(lines) > seen:
        try:
            cpu = cpu_seconds()
        except OSError:
            break
        rows += [dict(line=line, cpu_seconds=cpu, wall=time.time()) for line in lines[seen:]]
        seen = len(lines)
    time.sleep(0.1)
with open(out, "w") as f:
    json.dump(dict(command=cmd, rows=rows, returncode=child.wait()), f, indent=1)

"""What /proc says about processes (Linux): one reader of /proc/<pid>/stat for
the benchmarks' CPU figures and the tests' check that no server outlives
the tests that started it.

Servers started by tests and benchmarks run in sessions of their own, so
nothing but their PID ends them; a fixture that forgets one leaves a broker
running (ports, CPU, a mapped store) long after the run. The check looks at
the processes' parent PID while the test process is alive, which is when
they can still be told apart from anybody else's."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator


def read_stat(path: str) -> tuple[str, list[str]]:
    """A /proc/<pid>/stat or /proc/<pid>/task/<tid>/stat: the command (or
    thread) name, and the fields after it (state first, then the parent
    PID, the process group...). OSError when the process or thread is
    gone."""
    with open(path) as f:
        stat = f.read()
    head, _, rest = stat.rpartition(")")
    return head[head.find("(") + 1 :], rest.split()


def argv_of(pid: int) -> list[str]:
    """A process's command line (/proc/<pid>/cmdline). OSError when it is gone."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]


def process_stats() -> Iterator[tuple[int, list[str]]]:
    """(pid, read_stat's fields: state, parent PID, process group, ...) of
    every process; those that end meanwhile are left out. Nothing where
    there is no /proc."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return
    for name in names:
        if not name.isdigit():
            continue
        try:
            _, fields = read_stat(f"/proc/{name}/stat")
        except OSError:
            continue
        yield int(name), fields


def live_children(parent: int) -> Iterator[tuple[int, list[str]]]:
    """(pid, argv) of every process whose parent is `parent` and that has
    not exited (zombies left out)."""
    for pid, fields in process_stats():
        if int(fields[1]) != parent or fields[0] in ("Z", "X"):
            continue
        try:
            argv = argv_of(pid)
        except OSError:  # gone meanwhile
            continue
        yield pid, argv


def is_pyrmq_command(argv: list[str]) -> bool:
    """`python -m pyrmq ...` (a server, the dashboard, a CLI verb)."""
    return any(a == "-m" and b == "pyrmq" for a, b in itertools.pairwise(argv))


def pyrmq_children(parent: int | None = None) -> dict[int, list[str]]:
    """{pid: argv} of the `python -m pyrmq` processes `parent` (this process
    by default) started and that still run."""
    me = os.getpid() if parent is None else parent
    return {pid: argv for pid, argv in live_children(me) if is_pyrmq_command(argv)}

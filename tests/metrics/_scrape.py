"""Reading a metrics endpoint: GET /metrics over a real socket, parsed with
prometheus_client's parser."""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Iterator

from prometheus_client.parser import text_string_to_metric_families

NODE_LABELS = ("cluster", "node_type", "node_id")


def scrape(addr: str, timeout: float = 10.0) -> str:
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=timeout) as r:
        assert r.status == 200
        return str(r.read().decode())


def samples(text: str) -> Iterator[tuple[str, dict[str, str], float]]:
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            yield s.name, dict(s.labels), float(s.value)


def total(text: str, name: str, **labels: str) -> float:
    """The sum of name's samples whose labels include `labels`."""
    return sum(
        v
        for n, ls, v in samples(text)
        if n == name and all(ls.get(k) == want for k, want in labels.items())
    )


def series(text: str, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
    return [
        (ls, v)
        for n, ls, v in samples(text)
        if n == name and all(ls.get(k) == want for k, want in labels.items())
    ]


def listening_ports(pid: int) -> set[int]:
    """TCP ports process pid listens on (from /proc: its socket inodes)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:  # 0A: LISTEN
                ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports

"""Helpers shared by bench/backlog.py and bench/scale.py: brokers as
processes (pyrmq.testing.ProcessCluster) with production store sizes, and
what /proc says about them.

Everything here only reads /proc of processes this benchmark started, and
signals them only through ProcessCluster (by the PID of their Popen)."""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import sys
import time
from typing import Any

from bench import broker_load as bl
from pyrmq.storage import MessageStoreConfig
from pyrmq.testing.cluster import ProcessCluster

MIB = 1 << 20
GIB = 1 << 30


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def production_conf(segment_bytes: int, flush: str = "ASYNC_FLUSH") -> dict[str, Any]:
    """broker.conf keys over ProcessCluster's test defaults (8 MiB
    segments, tiny indexes): the store sizes a production broker uses, with
    segment_bytes CommitLog segments. Retention is switched off (these
    stores live minutes, and the machine's disk may already be past
    RocketMQ's 75%/85% clean-up ratios, which would delete the oldest
    segments the benchmark reads); the benchmark checks free space itself."""
    d = MessageStoreConfig()
    return {
        "flushDiskType": flush,
        "mappedFileSizeCommitLog": segment_bytes,
        "mappedFileSizeConsumeQueue": d.mapped_file_size_consume_queue,
        "maxHashSlotNum": d.max_hash_slot_num,
        "maxIndexNum": d.max_index_num,
        "warmMappedFileEnable": "true",
        "diskMaxUsedSpaceRatio": 95,
        "diskSpaceCleanForciblyRatio": 99,
        "diskSpaceWarningLevelRatio": 99,
        "cleanFileForciblyEnable": "false",
        "fileReservedTime": 100_000,
    }


def server(cluster: ProcessCluster, name: str) -> bl.Server:
    """The broker as a broker_load.Server (for send_load and friends)."""
    sp = cluster.brokers[name]
    assert sp.proc is not None
    return bl.Server(
        "broker",
        cluster.namesrv_addr,
        cluster.broker_addr(name),
        sp.proc.pid,
        sp.proc,
        str(sp.log_path),
    )


def proc_status(pid: int) -> dict[str, Any]:
    """RSS (VmRSS, RssAnon: heap, RssFile: mapped store pages) in MiB, VmHWM,
    open fds and mappings of a process."""
    out: dict[str, Any] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "Threads"):
                n = int(rest.split()[0])
                out[key] = n if key == "Threads" else round(n / 1024, 1)
    with contextlib.suppress(OSError):
        out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    with contextlib.suppress(OSError), open(f"/proc/{pid}/maps") as f:
        out["mappings"] = sum(1 for _ in f)
    return {
        "rss_mib": out.get("VmRSS"),
        "rss_peak_mib": out.get("VmHWM"),
        "rss_anon_mib": out.get("RssAnon"),
        "rss_file_mib": out.get("RssFile"),
        "threads": out.get("Threads"),
        "fds": out.get("fds"),
        "mappings": out.get("mappings"),
    }


def raise_nofile(want: int) -> dict[str, int]:
    """Raise this process's soft RLIMIT_NOFILE towards want (at most the
    hard limit); children (brokers, load processes) inherit it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    soft2, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return {"soft_before": soft, "soft": soft2, "hard": hard}


def machine() -> dict[str, Any]:
    """CPU count and model, memory, kernel: what every figure depends on."""
    model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = 0
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) // 1024
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "mem_mib": mem,
        "kernel": os.uname().release,
        "python": sys.version.split()[0],
    }


def git_tree() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            cwd=bl.REPO,
            timeout=10,
            check=False,
        )
        return out.stdout.strip()
    except OSError:
        return ""

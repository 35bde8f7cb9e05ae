"""Crash loop: a child process appends through pyrmq.storage.MessageStore from
several asyncio tasks and reports every acknowledged append; the parent
SIGKILLs it at a random moment, reopens the store with rmqcore and checks
that every reported append is there, intact, in its queue and in the index.
The same store directory is reused across cycles, so each recovery runs on a
store that an earlier recovery produced.

PYRMQ_CRASH_CYCLES sets the number of cycles per mode (default 12);
PYRMQ_CRASH_SEED fixes the random choices."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

import rmqcore
from tests.storage.crash_writer import CORE, QUEUES, TOPICS

ROOT_DIR = Path(__file__).resolve().parents[2]
CYCLES = int(os.environ.get("PYRMQ_CRASH_CYCLES", "12"))
SEED = int(os.environ.get("PYRMQ_CRASH_SEED", str(random.randrange(2**32))))
READY_TIMEOUT = 60.0
EXIT_TIMEOUT = 30.0


@dataclass(frozen=True)
class Reported:
    topic: str
    qid: int
    qoff: int
    phys: int
    size: int
    sha: str
    key: str


class Child:
    """The writer process, its stdout drained by a thread."""

    def __init__(self, root: Path, mode: str, seed: int, tag: str) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(ROOT_DIR), *filter(None, [os.environ.get("PYTHONPATH")])])}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.storage.crash_writer", str(root), mode, str(seed), tag],
            cwd=ROOT_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.stderr = b""
        self._out = threading.Thread(target=self._drain, daemon=True)
        self._err = threading.Thread(target=self._drain_err, daemon=True)
        self._out.start()
        self._err.start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        buf = b""
        for chunk in iter(lambda: self.proc.stdout.read1(65536), b""):  # type: ignore[union-attr]
            buf += chunk
            *done, buf = buf.split(b"\n")
            for line in done:
                self.lines.append(line.decode())
                if line.startswith(b"READY"):
                    self.ready.set()
        # A partial last line was never acknowledged: ignore it.

    def _drain_err(self) -> None:
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()

    def kill(self) -> int:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        rc = self.proc.wait(timeout=EXIT_TIMEOUT)
        self._out.join(timeout=EXIT_TIMEOUT)
        self._err.join(timeout=EXIT_TIMEOUT)
        assert not self._out.is_alive() and not self._err.is_alive(), "child pipes stayed open"
        return rc

    def reported(self) -> list[Reported]:
        out = []
        for line in self.lines:
            if line.startswith("OK "):
                _, topic, qid, qoff, phys, size, sha, key = line.split(" ")
                out.append(Reported(topic, int(qid), int(qoff), int(phys), int(size), sha, key))
        return out


def read_queue(core: rmqcore.MessageStoreCore, topic: str, qid: int) -> list[dict]:
    """Every record of a queue, through get_message and decode_records."""
    out: list[dict] = []
    offset = 0
    for _ in range(1_000_000):
        g = core.get_message(topic, qid, offset, 64, 1 << 30)
        if g.status != "FOUND":
            assert g.status in ("OFFSET_OVERFLOW_ONE", "NO_MESSAGE_IN_QUEUE",
                                "NO_MATCHED_LOGIC_QUEUE"), (topic, qid, offset, g)
            return out
        recs = rmqcore.decode_records(core.read_ranges(g.ranges))
        assert [(r["commit_log_offset"], r["store_size"]) for r in recs] == g.ranges
        out += recs
        offset = g.next_begin_offset
    raise AssertionError("get_message did not reach the end of the queue")


def verify(core: rmqcore.MessageStoreCore, reported: list[Reported],
           known: dict[int, tuple[str, int, int, str]]) -> None:
    """Every reported append and every record an earlier recovery kept is in
    the store, intact; queues are dense; the index finds reported keys."""
    by_phys: dict[int, dict] = {}
    for topic in TOPICS:
        for qid in range(QUEUES):
            recs = read_queue(core, topic, qid)
            assert [r["queue_offset"] for r in recs] == list(range(len(recs))), (topic, qid)
            assert core.max_offset_in_queue(topic, qid) == len(recs)
            for r in recs:
                assert (r["topic"], r["queue_id"]) == (topic, qid)
                by_phys[r["commit_log_offset"]] = r
    for rep in reported:
        r = by_phys.get(rep.phys)
        assert r is not None, f"reported append lost: {rep}"
        assert (r["topic"], r["queue_id"], r["queue_offset"], r["store_size"]) == (
            rep.topic, rep.qid, rep.qoff, rep.size), rep
        assert hashlib.sha256(r["body"]).hexdigest() == rep.sha, rep
        assert core.look_message_by_offset(rep.phys) == r
        assert rep.phys in core.query_message_offsets(rep.topic, rep.key), rep
    for phys, (topic, qid, qoff, sha) in known.items():
        r = by_phys.get(phys)
        assert r is not None, f"a record kept by an earlier recovery is gone: {phys}"
        assert (r["topic"], r["queue_id"], r["queue_offset"]) == (topic, qid, qoff)
        assert hashlib.sha256(r["body"]).hexdigest() == sha
    for phys, r in by_phys.items():
        known[phys] = (r["topic"], r["queue_id"], r["queue_offset"],
                       hashlib.sha256(r["body"]).hexdigest())


@pytest.mark.slow
@pytest.mark.timeout(120 + 30 * CYCLES)
@pytest.mark.parametrize("mode", ["SYNC_FLUSH", "ASYNC_FLUSH"])
def test_crash_loses_no_acknowledged_append(tmp_path: Path, mode: str) -> None:
    rng = random.Random(f"{SEED}-{mode}")
    root = tmp_path / "store"
    reported: list[Reported] = []
    known: dict[int, tuple[str, int, int, str]] = {}
    acked = defaultdict(int)
    for cycle in range(CYCLES):
        child = Child(root, mode, rng.randrange(2**31), f"c{cycle}")
        try:
            assert child.ready.wait(READY_TIMEOUT), f"writer did not start: {child.stderr!r}"
            time.sleep(rng.uniform(0.05, 0.6))
        finally:
            rc = child.kill()
        assert rc == -signal.SIGKILL, f"writer exited by itself ({rc}): {child.stderr.decode()}"
        new = child.reported()
        acked[cycle] = len(new)
        reported += new
        core = rmqcore.MessageStoreCore(str(root), **CORE)
        try:
            assert core.recovery["abnormal"], core.recovery
            verify(core, reported, known)
        except AssertionError as e:
            raise AssertionError(
                f"cycle {cycle} (seed {SEED}, {mode}): {e}\nrecovery: "
                f"{json.dumps(core.recovery)}\nchild: {child.lines[:1]}") from e
        finally:
            core.close()
        if cycle % 2:
            (root / "abort").touch()  # the next writer recovers an unclean store
    assert sum(acked.values()) > CYCLES, f"too few appends to mean anything: {dict(acked)}"
    print(f"\n{mode}: {CYCLES} SIGKILL cycles, {sum(acked.values())} acknowledged appends, "
          f"{len(known)} records verified intact after the last recovery")

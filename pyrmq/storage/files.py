"""A store directory read as files, without opening it as a MessageStore:
the offline tools' view (`pyrmq store check`, `pyrmq store dump`). Nothing
here writes, so the tools are safe on the store of a running broker and
never create a store where there was none.

The store's geometry is read from its files, never assumed: CommitLog and
ConsumeQueue files are pre-sized, named by the offset they start at
(20 digits), so a segment's size is both its file size and the distance
between consecutive names (`csrc/rmq_format.h` has the file naming).
"""

from __future__ import annotations

import dataclasses
import itertools
import mmap
import os
from collections.abc import Iterator
from typing import Any

import rmqcore
from pyrmq.common.errors import NotAStoreError, StoreError

_UNIT = rmqcore.CQ_STORE_UNIT_SIZE


def segments(directory: str) -> list[tuple[int, str]]:
    """(start offset, path) of every file named by its start offset in
    directory, in order; [] when there is no such directory."""
    if not os.path.isdir(directory):
        return []
    out = []
    for name in os.listdir(directory):
        if len(name) == 20 and name.isdigit():
            out.append((int(name), os.path.join(directory, name)))
    return sorted(out)


def map_read_only(path: str) -> mmap.mmap | None:
    """The whole file mapped read-only; None for an empty file."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size == 0:
            return None
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)


def require_store(root: str) -> None:
    """NotAStoreError naming what is wrong unless root holds a store."""
    if not os.path.exists(root):
        raise NotAStoreError(f"{root}: no such directory")
    if not os.path.isdir(root):
        raise NotAStoreError(f"{root} is not a directory")
    if not os.path.isdir(os.path.join(root, "commitlog")):
        raise NotAStoreError(f"{root} has no commitlog directory: not a pyrmq store")


def _file_size(files: list[tuple[int, str]], what: str) -> int | None:
    """The size every file of a sequence has (the last may still be being
    pre-sized: the first file's size decides); None when there are none."""
    if not files:
        return None
    size = os.path.getsize(files[0][1])
    for (start, _), (nxt, _) in itertools.pairwise(files):
        if nxt - start != size:
            raise StoreError(
                f"{what}: file {nxt:020d} does not follow {start:020d} at {size} bytes "
                "(files of different sizes: run `pyrmq store check`)"
            )
    return size


@dataclasses.dataclass(frozen=True)
class StoreGeometry:
    """File sizes a store was written with (None: no file of that kind yet)."""

    commit_log_file_size: int | None
    consume_queue_file_size: int | None

    @classmethod
    def read(cls, root: str) -> StoreGeometry:
        require_store(root)
        cl = _file_size(segments(os.path.join(root, "commitlog")), "CommitLog")
        cq = None
        cq_root = os.path.join(root, "consumequeue")
        if os.path.isdir(cq_root):
            for topic in sorted(os.listdir(cq_root)):
                tdir = os.path.join(cq_root, topic)
                for qid in sorted(os.listdir(tdir)) if os.path.isdir(tdir) else []:
                    cq = _file_size(segments(os.path.join(tdir, qid)), f"{topic}/{qid}")
                    if cq is not None:
                        break
                if cq is not None:
                    break
        return cls(cl, cq)

    def check_commit_log_size(self, wanted: int | None) -> int | None:
        """The CommitLog file size to open the store with: the files' own;
        `wanted` (a user's --segment-mb) must agree with them."""
        if wanted is not None and self.commit_log_file_size not in (None, wanted):
            raise ValueError(
                f"--segment-mb {wanted >> 20} does not match the store: its CommitLog "
                f"files are {self.commit_log_file_size:,} bytes "
                f"({self.commit_log_file_size / (1 << 20):g} MiB); leave --segment-mb out"
            )
        return self.commit_log_file_size if self.commit_log_file_size is not None else wanted


class CommitLogReader:
    """Records of a store's CommitLog by physical offset, read-only."""

    def __init__(self, root: str) -> None:
        self._segs = segments(os.path.join(root, "commitlog"))
        self._maps: dict[int, mmap.mmap | None] = {}

    def close(self) -> None:
        for mm in self._maps.values():
            if mm is not None:
                mm.close()
        self._maps.clear()

    def __enter__(self) -> CommitLogReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def record(self, phys: int, size: int) -> dict[str, Any] | None:
        """The record at phys (size bytes, as its ConsumeQueue unit says),
        decoded; None when no segment holds it whole or it fails its checks."""
        held = [(start, path) for start, path in self._segs if start <= phys]
        if not held:
            return None
        start, path = held[-1]
        if start not in self._maps:
            self._maps[start] = map_read_only(path)
        mm = self._maps[start]
        pos = phys - start
        if mm is None or pos + size > len(mm):
            return None
        try:
            recs = rmqcore.decode_records(mm[pos : pos + size])
        except StoreError:
            return None
        return recs[0] if len(recs) == 1 else None


def queue_ids(root: str, topic: str) -> list[int]:
    """The queue ids of topic that have ConsumeQueue files."""
    tdir = os.path.join(root, "consumequeue", topic)
    if not os.path.isdir(tdir):
        return []
    return sorted(int(q) for q in os.listdir(tdir) if q.isdigit())


def stored_topics(root: str) -> dict[str, int]:
    """topic -> its highest queue id + 1, for every topic with ConsumeQueue
    files under root (a queue gets files with its first message)."""
    cq_root = os.path.join(root, "consumequeue")
    if not os.path.isdir(cq_root):
        return {}
    out = {}
    for topic in os.listdir(cq_root):
        ids = queue_ids(root, topic)
        if ids:
            out[topic] = ids[-1] + 1
    return out


def read_queue(
    root: str, topic: str, queue_id: int, offset: int = 0, count: int = 20
) -> Iterator[dict[str, Any]]:
    """Up to count decoded messages of one queue from queue offset `offset`,
    in order, straight from the files. A unit whose record is missing or
    damaged is skipped (`pyrmq store check` reports it)."""
    require_store(root)
    if queue_id < 0:
        raise ValueError(f"queue id {queue_id} is negative")
    if not queue_ids(root, topic):
        raise NotAStoreError(f"{root}: no messages of topic {topic!r} in this store")
    qdir = os.path.join(root, "consumequeue", topic, str(queue_id))
    if not os.path.isdir(qdir):
        return  # a queue with no message yet has no ConsumeQueue files
    shown = 0
    with CommitLogReader(root) as log:
        for start, path in segments(qdir):
            mm = map_read_only(path)
            if mm is None:
                continue
            with mm:
                if offset >= (start + len(mm)) // _UNIT:
                    continue
                for qoff, phys, size, _tags in rmqcore.iter_cq_units(mm, start // _UNIT):
                    if qoff < offset:
                        continue
                    if shown >= count:
                        return
                    rec = log.record(phys, size)
                    if rec is None:
                        continue
                    shown += 1
                    yield rec

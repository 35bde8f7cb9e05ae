"""Offline, read-only verification of a store directory (nothing is
repaired: opening the store with MessageStore does that).

Walks every CommitLog segment record by record (structure, position, body
CRC), then checks every ConsumeQueue unit against the records it points at."""

from __future__ import annotations

import dataclasses
import os
from collections import defaultdict
from typing import Any

import rmqcore
from pyrmq.common.errors import StoreError
from pyrmq.storage.files import map_read_only, require_store, segments

_UNIT = rmqcore.CQ_STORE_UNIT_SIZE
_TRANSACTION_MASK = rmqcore.SYSFLAG_TRANSACTION_ROLLBACK  # both transaction bits
_NOT_QUEUED = (rmqcore.SYSFLAG_TRANSACTION_PREPARED, rmqcore.SYSFLAG_TRANSACTION_ROLLBACK)


@dataclasses.dataclass
class CheckReport:
    root: str
    segments: int = 0
    records: int = 0
    commit_log_end: int = 0
    queues: dict[str, int] = dataclasses.field(default_factory=dict)
    problems: list[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self) | {"ok": self.ok}


def check_store(root: str) -> CheckReport:
    """Verify root without changing it; problems are listed, not raised."""
    require_store(root)
    rep = CheckReport(root=root)
    records: dict[int, tuple[str, int, int, int]] = {}  # phys -> topic, qid, qoff, size
    per_queue: dict[tuple[str, int], int] = defaultdict(int)
    segs = segments(os.path.join(root, "commitlog"))
    for i, (start, path) in enumerate(segs):
        rep.segments += 1
        if i and start != segs[i - 1][0] + os.path.getsize(segs[i - 1][1]):
            rep.problems.append(f"CommitLog segment {start:020d} does not follow the previous one")
        mm = map_read_only(path)
        if mm is None:
            continue
        with mm:
            try:
                for pos, rec in rmqcore.iter_records(mm):
                    phys = start + pos
                    if rec["commit_log_offset"] != phys:
                        rep.problems.append(
                            f"record at {phys} says it is at {rec['commit_log_offset']}"
                        )
                        break
                    rep.records += 1
                    rep.commit_log_end = phys + rec["store_size"]
                    if rec["sys_flag"] & _TRANSACTION_MASK in _NOT_QUEUED:
                        # a prepared or rolled-back transaction message (or
                        # recovery's damaged-range filler): in no queue
                        continue
                    key = (rec["topic"], rec["queue_id"])
                    records[phys] = (*key, rec["queue_offset"], rec["store_size"])
                    per_queue[key] += 1
            except StoreError as e:
                rep.problems.append(f"segment {start:020d}: {e}")
    cq_root = os.path.join(root, "consumequeue")
    for topic in sorted(os.listdir(cq_root)) if os.path.isdir(cq_root) else []:
        for qid_name in sorted(os.listdir(os.path.join(cq_root, topic))):
            qid = int(qid_name) if qid_name.isdigit() else -1
            units = 0
            for start, path in segments(os.path.join(cq_root, topic, qid_name)):
                mm = map_read_only(path)
                if mm is None:
                    continue
                with mm:
                    for qoff, phys, size, _tags in rmqcore.iter_cq_units(mm, start // _UNIT):
                        units += 1
                        want = records.get(phys)
                        if want is None:
                            if segs and phys >= segs[0][0]:
                                rep.problems.append(
                                    f"{topic}/{qid_name} unit {qoff} points at "
                                    f"{phys}, where no record starts"
                                )
                        elif want != (topic, qid, qoff, size):
                            rep.problems.append(
                                f"{topic}/{qid_name} unit {qoff} points at a "
                                f"record of {want[0]}/{want[1]} offset {want[2]}"
                            )
            rep.queues[f"{topic}/{qid_name}"] = units
    for (topic, qid), n in per_queue.items():
        if rep.queues.get(f"{topic}/{qid}", 0) < n:
            rep.problems.append(
                f"{topic}/{qid}: {n} records but "
                f"{rep.queues.get(f'{topic}/{qid}', 0)} ConsumeQueue units "
                "(opening the store re-dispatches them)"
            )
    return rep

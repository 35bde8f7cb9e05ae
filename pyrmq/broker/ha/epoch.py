"""EpochFileCache (RocketMQ 5's epoch checkpoint): which master epoch wrote
which part of the CommitLog, so that replicas that followed different
masters find the offset up to which their logs agree.

<storePathRootDir>/config/epochFileCheckpoint.json holds
``{"entries": [[epoch, startOffset], ...]}``, epochs ascending: entry i
covers the CommitLog from its startOffset to the next entry's (the last:
to the end of the log). A broker appends an entry when the controller makes
it master (epoch = masterEpoch, start = its CommitLog end then); a slave
takes its master's entries at each replication handshake, and cuts its log
to consistent_offset() when it is longer than what the two share."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence

from pyrmq.common.config_file import write_json_atomic

Entry = tuple[int, int]


class EpochFileCache:
    def __init__(self, store_root: str) -> None:
        self.path = os.path.join(store_root, "config", "epochFileCheckpoint.json")
        self.entries: list[Entry] = []
        try:
            with open(self.path, "rb") as f:
                doc = json.load(f)
            self.entries = [(int(e), int(o)) for e, o in doc.get("entries", [])]
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError) as e:
            raise ValueError(f"{self.path} is damaged ({e}); restore it or delete the store") from e

    @property
    def last_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else 0

    async def _save(self) -> None:
        doc = {"entries": [list(e) for e in self.entries]}
        await asyncio.get_running_loop().run_in_executor(None, write_json_atomic, self.path, doc)

    async def append(self, epoch: int, start_offset: int) -> None:
        """This broker became master of `epoch` at start_offset."""
        if self.entries and epoch <= self.last_epoch:
            if epoch == self.last_epoch:
                return
            raise ValueError(f"epoch {epoch} is older than the last one, {self.last_epoch}")
        self.entries.append((epoch, start_offset))
        await self._save()

    async def replace(self, entries: Sequence[Entry], up_to: int) -> None:
        """Take a master's entries (a slave, after its handshake), keeping
        those that start at or before up_to (where its copy will continue)."""
        keep = [(int(e), int(o)) for e, o in entries if int(o) <= up_to]
        if keep != self.entries:
            self.entries = keep
            await self._save()


def consistent_offset(
    mine: Sequence[Entry], my_end: int, theirs: Sequence[Entry], their_end: int
) -> int | None:
    """The CommitLog offset up to which two replicas' logs agree, from their
    epoch entries and ends: the end, in the last epoch both wrote, of
    whichever wrote less of it. None when they share no epoch."""
    theirs_at = {e: i for i, (e, _) in enumerate(theirs)}
    for i in range(len(mine) - 1, -1, -1):
        epoch, start = mine[i]
        if start >= my_end and i > 0:
            continue  # nothing of this epoch reached me
        j = theirs_at.get(epoch)
        if j is None or theirs[j][1] != start:
            continue
        end_mine = mine[i + 1][1] if i + 1 < len(mine) else my_end
        end_theirs = theirs[j + 1][1] if j + 1 < len(theirs) else their_end
        return min(end_mine, end_theirs, my_end)
    return None

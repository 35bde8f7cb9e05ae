"""Scenario 3, full disk: the store on a size-limited tmpfs.

The promise: when the disk fills, sends fail with SERVICE_NOT_AVAILABLE
(code 14, "the broker's disk is full" in the remark) and write nothing;
everything acknowledged before is still there, byte for byte; consumers keep
reading; sending resumes once space comes back (freed by somebody, or by
retention). The broker process never dies of it (no SIGBUS from a mapped
page the disk cannot back).

Store-level regressions first (deterministic, a few MiB of tmpfs), then the
scenario against a broker subprocess (ProcessCluster) with real clients."""

from __future__ import annotations

import asyncio
import pathlib
import signal
import subprocess
import sys
from typing import Any

import pytest

import rmqcore
from pyrmq.common.errors import DiskFullError
from pyrmq.storage import MessageStore, MessageStoreConfig
from tests.chaos._disk import fill, tmpfs

_REPO = pathlib.Path(__file__).resolve().parents[2]


def _store_config(root: pathlib.Path, **kw: Any) -> MessageStoreConfig:
    base: dict[str, Any] = {
        "store_path_root_dir": str(root),
        "mapped_file_size_commit_log": 1 << 20,
        "max_message_size": 16 * 1024,
        "mapped_file_size_consume_queue": 20 * 1000,
        "warm_mapped_file_enable": False,
        "message_index_enable": False,
    }
    base.update(kw)
    return MessageStoreConfig(**base)


# -- store-level regressions -----------------------------------------------------------------


def test_sparse_segment_on_a_full_disk_is_refused_not_sigbus(tmp_path: pathlib.Path) -> None:
    """A segment copied sparse (cp --sparse=always, rsync -S, tar -S: its
    unwritten tail becomes holes) on a full disk: writing through the mapping
    into a hole is a SIGBUS. The store must fill the holes when it opens the
    file, and so refuse with ENOSPC instead of crashing."""
    with tmpfs(tmp_path / "fs", 16) as fs:
        root = fs / "store"
        r = subprocess.run(
            [sys.executable, "-m", "tests.chaos._disk_reopen", str(root)],
            cwd=_REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.stdout.startswith("OPENED 3000"), r.stdout + r.stderr
        seg_dir = root / "commitlog"
        segments = sorted(seg_dir.iterdir())
        backup = tmp_path / "segment.sparse"
        subprocess.run(["cp", "--sparse=always", str(segments[0]), str(backup)], check=True)
        for seg in segments:  # the prepared next one too: the active segment is the last
            seg.unlink()
        subprocess.run(["cp", "--sparse=always", str(backup), str(segments[0])], check=True)
        st = segments[0].stat()
        assert st.st_blocks * 512 < st.st_size, "cp did not make a sparse copy"
        fill(fs / "filler")
        r = subprocess.run(
            [sys.executable, "-m", "tests.chaos._disk_reopen", str(root)],
            cwd=_REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode != -signal.SIGBUS, "SIGBUS writing into a hole of a mapped segment"
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.startswith("REFUSED DiskFullError"), r.stdout + r.stderr
        # space back: the same store opens and takes writes again
        (fs / "filler").unlink()
        r = subprocess.run(
            [sys.executable, "-m", "tests.chaos._disk_reopen", str(root)],
            cwd=_REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.stdout.startswith("OPENED 3000"), r.stdout + r.stderr


def test_a_message_whose_queue_file_cannot_be_created_stops_later_puts(
    tmp_path: pathlib.Path, arun: Any
) -> None:
    """Someone else fills the disk. A put whose record fits in the
    pre-allocated CommitLog segment succeeds, but its new ConsumeQueue file
    cannot be created, so it is stored and not yet dispatched; dispatch is in
    CommitLog order, so every later put would be acknowledged and invisible
    to consumers. Later puts must be refused (nothing written) until the
    dispatch catches up, and everything appears once space is back."""

    async def main(fs: pathlib.Path) -> None:
        async with MessageStore(_store_config(fs / "store")) as store:
            store.put_message_nowait("Old", 0, b"old-0")
            fill(fs / "filler")
            stored = store.put_message_nowait("New", 0, b"new-0")  # CQ file for New:0 fails
            assert stored.queue_offset == 0
            assert store.core.dispatch_error is not None
            end = store.commit_log_max_offset
            for body in (b"old-1", b"new-1"):
                with pytest.raises(DiskFullError):
                    store.put_message_nowait("Old" if body.startswith(b"old") else "New", 0, body)
            assert store.commit_log_max_offset == end  # refused: nothing written
            assert store.get_message("Old", 0, 0).status == "FOUND"  # readers unaffected
            (fs / "filler").unlink()
            assert store.put_message_nowait("Old", 0, b"old-1").queue_offset == 1
            assert store.core.dispatch_error is None
            for topic, n in (("Old", 2), ("New", 1)):
                got = store.get_message(topic, 0, 0, 32)
                assert got.status == "FOUND"
                assert got.next_begin_offset == n

    with tmpfs(tmp_path / "fs", 4) as fs:
        arun(main(fs), timeout=30)


def test_past_the_warning_level_puts_are_refused_until_use_falls_back(
    tmp_path: pathlib.Path, arun: Any
) -> None:
    """diskSpaceWarningLevelRatio (RocketMQ's RunningFlags DISK_FULL): past
    it every put is refused with DiskFullError and writes nothing; between
    diskSpaceCleanForciblyRatio and the warning level it stays refused; at
    or under the forcibly ratio puts resume, measured again by a refused put
    (not only by the next retention pass). The disk's use is injected."""
    use = {"ratio": 0.50}

    async def main() -> None:
        cfg = _store_config(tmp_path / "store", clean_resource_interval_ms=3_600_000)
        async with MessageStore(cfg, disk_ratio=lambda _path: use["ratio"]) as store:
            store.put_message_nowait("T", 0, b"before")
            use["ratio"] = 0.93
            await store.clean_expired_files()  # the retention pass notices
            assert store.disk_full
            end = store.commit_log_max_offset
            with pytest.raises(DiskFullError, match="diskSpaceWarningLevelRatio=90%"):
                store.put_message_nowait("T", 0, b"refused")
            batch = rmqcore.encode_batch([(b"refused", {}, 0)])
            with pytest.raises(DiskFullError):
                store.put_messages_nowait("T", 0, batch)
            use["ratio"] = 0.87  # under the warning level, over the forcibly ratio
            await asyncio.sleep(0.15)
            with pytest.raises(DiskFullError):
                store.put_message_nowait("T", 0, b"refused")
            assert store.commit_log_max_offset == end
            use["ratio"] = 0.80
            await asyncio.sleep(0.15)  # past the recheck interval
            assert store.put_message_nowait("T", 0, b"after").queue_offset == 1
            assert not store.disk_full

    arun(main(), timeout=30)

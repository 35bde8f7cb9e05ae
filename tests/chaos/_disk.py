"""Full-disk helpers: a size-limited tmpfs, and a filler file that takes
every byte left on it (what another process filling the disk looks like)."""

from __future__ import annotations

import contextlib
import pathlib
import subprocess
from collections.abc import Iterator

import pytest

#: bytes written per call while filling (the last call fails short)
FILL_CHUNK = 64 * 1024


@contextlib.contextmanager
def tmpfs(mountpoint: pathlib.Path, size_mib: int) -> Iterator[pathlib.Path]:
    """Mount a tmpfs of size_mib MiB at mountpoint (created if missing) for
    the block; skip the test when mounting is refused (not root, or no
    CAP_SYS_ADMIN in this container). Always unmounted afterwards."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs", str(mountpoint)],
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        pytest.skip(
            f"cannot mount a {size_mib} MiB tmpfs at {mountpoint} (needs root / CAP_SYS_ADMIN): "
            f"{res.stderr.strip() or res.returncode}"
        )
    try:
        yield mountpoint
    finally:
        # lazy: a broker that did not exit yet must not keep the mount alive
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


def fill(path: pathlib.Path, limit: int | None = None) -> int:
    """Write path until the filesystem refuses (ENOSPC), or limit bytes;
    the bytes written. Small writes at the end take the last partial pages."""
    written = 0
    chunk = b"\xa5" * FILL_CHUNK
    with open(path, "ab", buffering=0) as f:
        for size in (FILL_CHUNK, 4096, 512):
            piece = chunk[:size]
            while limit is None or written + size <= limit:
                try:
                    n = f.write(piece)
                except OSError:
                    break
                written += n or 0
                if not n:
                    break
    return written


@contextlib.contextmanager
def ext4_image(
    image: pathlib.Path, mountpoint: pathlib.Path, size_mib: int, reserved_pct: int
) -> Iterator[pathlib.Path]:
    """A loop-mounted ext4 of size_mib MiB with reserved_pct% of its blocks
    reserved (mkfs.ext4 -m): skip the test when mkfs or mount is refused.
    Always unmounted and deleted afterwards."""
    mountpoint.mkdir(parents=True, exist_ok=True)
    with open(image, "wb") as f:
        f.truncate(size_mib << 20)
    try:
        mk = subprocess.run(
            ["mkfs.ext4", "-q", "-F", "-m", str(reserved_pct), str(image)],
            capture_output=True,
            text=True,
        )
        if mk.returncode != 0:
            pytest.skip(f"cannot make an ext4 image: {mk.stderr.strip() or mk.returncode}")
        res = subprocess.run(
            ["mount", "-o", "loop", str(image), str(mountpoint)], capture_output=True, text=True
        )
        if res.returncode != 0:
            pytest.skip(f"cannot loop-mount an ext4 image (needs root): {res.stderr.strip()}")
        try:
            yield mountpoint
        finally:
            subprocess.run(["umount", str(mountpoint)], check=False)
    finally:
        image.unlink(missing_ok=True)

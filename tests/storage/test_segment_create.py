"""A new CommitLog segment is written (its first window of zeros) before it
has its name (csrc/mapped_file.c rmq_mapped_file_create_filled), so no
thread ever faults its pages in through a mapping: such faults hold the
process's mmap_lock while the filesystem works, and on a slow disk that
stalled the broker's event loop for 20 s in CI. Driven through cffi."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("cffi")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
_cffi_core = importlib.import_module("_cffi_core")

ffi, lib = _cffi_core.load()

SIZE = 4 << 20
FILL = 1 << 20


def _create(path: Path, size: int = SIZE, fill: int = FILL) -> int:
    made = ffi.new("int *")
    rc = lib.rmq_mapped_file_create_filled(str(path).encode(), size, fill, made)
    assert rc == 0, ffi.string(lib.rmq_strerror(rc)).decode()
    return int(made[0])


def test_new_file_is_named_whole_with_its_window_written(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000"
    made = _create(path)
    if made == 0:
        pytest.skip("no O_TMPFILE on this filesystem: segments are created the plain way")
    assert made == 1
    st = os.stat(path)
    assert st.st_size == SIZE
    assert st.st_blocks * 512 >= FILL  # the window's blocks are reserved
    assert path.read_bytes() == bytes(SIZE)
    assert os.listdir(tmp_path) == [path.name]  # nothing else left behind


def test_a_file_someone_named_first_is_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "00000000000000000000"
    if _create(path) == 0:
        pytest.skip("no O_TMPFILE on this filesystem: segments are created the plain way")
    with open(path, "r+b") as f:  # another thread appended a record meanwhile
        f.write(b"record")
    assert _create(path) == -1
    assert path.read_bytes()[:6] == b"record"
    assert os.path.getsize(path) == SIZE

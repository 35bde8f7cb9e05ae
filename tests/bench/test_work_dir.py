"""The benchmarks' --dir: a missing directory is made; one that cannot be
made is a one-line command-line error, not a traceback."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from bench._args import work_dir


def test_a_missing_dir_is_made(tmp_path: pathlib.Path) -> None:
    deeper = tmp_path / "not" / "yet"
    assert work_dir(str(deeper)) == str(deeper)
    assert deeper.is_dir()


@pytest.mark.parametrize("module", ["bench.duel", "bench.multicore", "bench.broker_report"])
def test_a_dir_that_cannot_be_made_is_one_line_of_error(
    module: str, tmp_path: pathlib.Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    r = subprocess.run(
        [sys.executable, "-m", module, "--dir", str(blocker / "stores")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    assert f"argument --dir: cannot use '{blocker / 'stores'}' for the stores" in r.stderr

"""csrc/ is plain C11: it compiles warning-free under strict flags and never
includes Python.h (STYLE.md section 6)."""

from __future__ import annotations

import pathlib
import shutil
import subprocess

import pytest

CSRC = pathlib.Path(__file__).resolve().parent.parent / "csrc"
FLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra", "-Wconversion", "-Wsign-compare", "-Werror",
         "-fsyntax-only"]


@pytest.mark.parametrize("source", sorted(p.name for p in CSRC.glob("*.c")))
def test_compiles_without_warnings(source):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    proc = subprocess.run([cc, *FLAGS, "-I", str(CSRC), str(CSRC / source)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_no_python_in_the_c_core():
    offenders = [p.name for p in CSRC.iterdir() if "Python.h" in p.read_text(errors="replace")]
    assert offenders == []

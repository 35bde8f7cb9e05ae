"""Command-line argument types the benchmarks share."""

from __future__ import annotations

import argparse
import os


def work_dir(path: str) -> str:
    """argparse type of the benchmarks' --dir: the directory, made if it is
    missing; a path that cannot be one is the command line's error."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise argparse.ArgumentTypeError(f"cannot use {path!r} for the stores: {e.strerror}") from e
    return path

"""pysyncobj 0.3.17 overwrites socket.inet_ntop with a Windows-only function
when it is imported (pysyncobj/win_inet_pton.py): every later inet_ntop in
the process raised TypeError (a loaded CI run lost 8 client and Spark tests
to it once the broker imported the controller). pyrmq's Raft module puts
the real one back; this checks it in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_controller_keeps_socket_inet_ntop_working() -> None:
    code = (
        "import socket\n"
        "import pyrmq.controller.raft, pyrmq.broker, pyrmq.serve\n"
        "print(socket.inet_ntop(socket.AF_INET, b'\\x7f\\x00\\x00\\x01'))\n"
        "print(socket.inet_ntop(socket.AF_INET6, bytes(15) + b'\\x01'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.split() == ["127.0.0.1", "::1"]

"""Run inside a network namespace by test_hostile_input's storm: open N
connections to a broker, make them look like real clients (half of them
send a request and read its answer, the other half send half a frame), print
`READY <local ports>` and wait to be killed. The test then cuts the
namespace's link and SIGKILLs this process: the broker is left with N
connections whose peer is gone without a FIN or RST (half-open).

    python -m tests.chaos._hostile_halfopen HOST PORT N"""

from __future__ import annotations

import socket
import struct
import sys
import time

from pyrmq.remoting import RemotingCommand
from pyrmq.remoting.codes import RequestCode

#: seconds this process waits to be killed before it exits by itself
LIFETIME = 600.0


def main() -> int:
    host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    frame = RemotingCommand(RequestCode.GET_MAX_OFFSET, {"topic": "T", "queueId": "0"}).encode()
    socks = []
    for i in range(n):
        s = socket.create_connection((host, port), timeout=10)
        if i % 2 == 0:
            s.sendall(frame)
            (length,) = struct.unpack(">I", s.recv(4, socket.MSG_WAITALL))
            s.recv(length, socket.MSG_WAITALL)
        else:
            s.sendall(frame[: len(frame) // 2])
        socks.append(s)
    print("READY", " ".join(str(s.getsockname()[1]) for s in socks), flush=True)
    time.sleep(LIFETIME)
    return 0


if __name__ == "__main__":
    sys.exit(main())

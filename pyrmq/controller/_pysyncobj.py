"""pysyncobj, imported so that it leaves the process's socket module alone.

pysyncobj 0.3.17 (pysyncobj/win_inet_pton.py, imported by its TCP layer)
replaces socket.inet_ntop with a Windows-only function on every platform:
after `import pysyncobj`, every inet_ntop in the process raises TypeError.
This module imports it and puts the real one back
(tests/controller/test_raft_import.py checks)."""

import socket

_INET_NTOP = socket.inet_ntop
try:
    from pysyncobj import (
        FAIL_REASON,
        SyncObj,
        SyncObjConf,
        SyncObjConsumer,
        replicated,
    )
finally:
    socket.inet_ntop = _INET_NTOP

__all__ = ["FAIL_REASON", "SyncObj", "SyncObjConf", "SyncObjConsumer", "replicated"]

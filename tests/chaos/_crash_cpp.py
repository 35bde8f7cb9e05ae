"""The C++ client (rocketmq==0.4.4) as load for the crash loop, in its own
process: `python -m tests.chaos._crash_cpp NAMESRV TOPIC GROUP PREFIX`.

It sends bodies PREFIX-<n> with send_sync as fast as the broker answers and
runs one push consumer of GROUP on TOPIC. It reports on stdout, one line
each, flushed:

    READY                      producer and consumer started
    ACK <id>                   a send answered SEND_OK
    FAIL <id> <error>          a send that raised or answered another status
    RECV <id> <queue> <offset> a delivery to the consumer's listener
    STOPPED                    after STOP: no more sends
    CLOSING                    after QUIT: shutting the clients down
    DONE                       both shut down

and reads STOP and QUIT on stdin. Why a process of its own: the wheel has a
rare native crash while a push consumer shuts down (a known issue of the
client, not of the broker), which must not take the test run with it. The
parent treats an exit after CLOSING as that known issue, and any exit before
it as a failure."""

from __future__ import annotations

import sys
import threading
import time

from rocketmq.client import SendStatus

from tests.interop.cpp import Clients, Collector, Received, make_message

#: seconds between sends that failed (the broker is down), so a dead broker
#: does not turn the loop into a busy spin of timeouts
FAIL_PAUSE = 0.05
#: seconds between sends (about 200 sends/s at most)
SEND_PAUSE = 0.005
#: hours the process may live at most, however it is driven
MAX_LIFETIME = 2 * 3600.0


class Out:
    """Lines to stdout from several threads (sender, listener threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def line(self, text: str) -> None:
        with self._lock:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()


def main(namesrv: str, topic: str, group: str, prefix: str) -> int:
    out = Out()
    clients = Clients(namesrv)
    stop = threading.Event()
    born = time.monotonic()

    def on_message(rec: Received) -> bool:
        body = rec.body.decode(errors="replace")
        out.line(f"RECV {body} {rec.queue_id} {rec.queue_offset}")
        return True

    producer = clients.producer(timeout_ms=3000)
    consumer = clients.push_consumer(group, topic, Collector("cpp"), handler=on_message)
    del consumer  # shut down through clients
    out.line("READY")

    def send_loop() -> None:
        n = 0
        while not stop.is_set() and time.monotonic() - born < MAX_LIFETIME:
            mid = f"{prefix}-{n:07d}"
            n += 1
            try:
                res = producer.send_sync(make_message(topic, mid, keys=mid))
            except Exception as exc:  # the broker is down: the client raises
                out.line(f"FAIL {mid} {type(exc).__name__}")
                time.sleep(FAIL_PAUSE)
                continue
            if res.status == SendStatus.OK:
                out.line(f"ACK {mid}")
            else:
                out.line(f"FAIL {mid} {res.status}")
            time.sleep(SEND_PAUSE)

    sender = threading.Thread(target=send_loop, name="cpp-sender", daemon=True)
    sender.start()
    for raw in sys.stdin:
        cmd = raw.strip()
        if cmd == "STOP":
            stop.set()
            sender.join(60)
            out.line("STOPPED")
        elif cmd == "QUIT":
            break
    stop.set()
    sender.join(60)
    out.line("CLOSING")
    clients.close()
    out.line("DONE")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))

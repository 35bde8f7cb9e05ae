"""ControllerRaft: the replicated log of the controller group, a pysyncobj
SyncObj whose @replicated methods apply to a ReplicasInfo.

pysyncobj runs its own thread (autoTick): it elects the Raft leader, ships
entries to followers, commits them once a majority has them and calls the
@replicated method on every controller, in log order. The journal
(controllerStorePath/raft.journal) and the full dump written at log
compaction (controllerStorePath/raft.dump) let a restarted controller replay
its state. The only thread boundary of pyrmq/controller is here:

* `propose(name, *args)` (event loop) hands a command to pysyncobj and
  returns an asyncio future; pysyncobj's callback (its thread) completes it
  through loop.call_soon_threadsafe. Nothing on the loop ever waits on the
  Raft thread.
* reads (`state`, `leader`, `is_leader`) look at values the Raft thread
  replaces whole (see replicas.py), never at structures it mutates.

Commands a follower proposes are forwarded to the leader by pysyncobj."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from typing import Any

from pyrmq.common.errors import ClientError
from pyrmq.controller._pysyncobj import (
    FAIL_REASON,
    SyncObj,
    SyncObjConf,
    SyncObjConsumer,
    replicated,
)
from pyrmq.controller.config import ControllerConfig
from pyrmq.controller.replicas import Outcome, ReplicasInfo

log = logging.getLogger("pyrmq.controller")

#: pysyncobj's election timeout range (s). Its defaults (0.4-1.4 s) elect a
#: new leader within ~2 s of a crash; a busy 2-core machine still answers
#: heartbeats (every appendEntriesPeriod, 0.1 s) well inside them.
RAFT_MIN_TIMEOUT = 0.6
RAFT_MAX_TIMEOUT = 1.8
#: a leader that has heard from no majority for this long steps down (the
#: pysyncobj default, 30 s, would keep a cut-off leader answering as one)
LEADER_FALLBACK_TIMEOUT = 4.0

_FAIL_TEXT = {
    FAIL_REASON.QUEUE_FULL: "the Raft command queue is full",
    FAIL_REASON.MISSING_LEADER: "there is no Raft leader",
    FAIL_REASON.DISCARDED: "the entry was discarded by a new Raft leader",
    FAIL_REASON.NOT_LEADER: "the Raft leader changed before the entry committed",
    FAIL_REASON.LEADER_CHANGED: "the Raft leader changed before the entry committed",
    FAIL_REASON.REQUEST_DENIED: "the Raft leader denied the entry",
    FAIL_REASON.UNKNOWN_OUTCOME: "the outcome of the entry is unknown",
}


class RaftFailure(Exception):
    """A command that did not commit; `reason` is pysyncobj's FAIL_REASON."""

    def __init__(self, reason: int) -> None:
        super().__init__(_FAIL_TEXT.get(reason, f"Raft failure {reason}"))
        self.reason = reason


def check_bindable(host: str, port: int) -> None:
    """ClientError now, rather than pysyncobj retrying a bind forever in its
    thread, when the Raft port is taken."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
    except OSError as e:
        raise ClientError(f"cannot listen on the Raft port {host}:{port}: {e.strerror}") from None


class ReplicatedState(SyncObjConsumer):
    """The log entries, applied on pysyncobj's thread in log order. Its
    attributes set after SyncObjConsumer.__init__ (`info`) are what the full
    dump holds."""

    def __init__(self) -> None:
        super().__init__()
        self.info = ReplicasInfo()

    @replicated
    def barrier(self) -> Outcome:
        """No change: a new leader commits one entry of its own term before
        it serves, so every entry committed before it is applied here (Raft
        commits earlier terms' entries only through one of the current)."""
        return Outcome()

    @replicated
    def member(self, controller_id: str, address: str, fingerprint: str) -> Outcome:
        return self.info.apply_member(controller_id, address, fingerprint)

    @replicated
    def apply_broker_id(
        self, cluster: str, broker_name: str, broker_id: int, address: str, check_code: str
    ) -> Outcome:
        return self.info.apply_broker_id(cluster, broker_name, broker_id, address, check_code)

    @replicated
    def broker_address(self, broker_name: str, broker_id: int, address: str) -> Outcome:
        return self.info.apply_broker_address(broker_name, broker_id, address)

    @replicated
    def alter_sync_state_set(
        self, broker_name: str, master_id: int, master_epoch: int, sss_epoch: int, new_set: Any
    ) -> Outcome:
        return self.info.apply_alter_sync_state_set(
            broker_name, master_id, master_epoch, sss_epoch, frozenset(new_set)
        )

    @replicated
    def elect_master(
        self, broker_name: str, new_master: int | None, expected_master_epoch: int
    ) -> Outcome:
        return self.info.apply_elect_master(broker_name, new_master, expected_master_epoch)

    @replicated
    def clean_broker_data(self, broker_name: str, broker_ids: Any) -> Outcome:
        return self.info.apply_clean_broker_data(
            broker_name, frozenset(broker_ids) if broker_ids else None
        )


class ControllerRaft(SyncObj):
    """The replicated ReplicasInfo of one controller."""

    def __init__(self, config: ControllerConfig) -> None:
        me = config.self_peer
        others = [p.addr for p in config.peers if p.id != me.id]
        os.makedirs(config.store_path, exist_ok=True)
        check_bindable(me.host, me.port)
        self.state = ReplicatedState()
        self._ids = {p.addr: p.id for p in config.peers}
        conf = SyncObjConf(
            journalFile=os.path.join(config.store_path, "raft.journal"),
            fullDumpFile=os.path.join(config.store_path, "raft.dump"),
            # fork() of a process running an event loop and threads is unsafe
            useFork=False,
            raftMinTimeout=RAFT_MIN_TIMEOUT,
            raftMaxTimeout=RAFT_MAX_TIMEOUT,
            leaderFallbackTimeout=LEADER_FALLBACK_TIMEOUT,
            dynamicMembershipChange=False,
            commandsWaitLeader=False,
        )
        super().__init__(me.addr, others, conf, consumers=[self.state])

    @property
    def info(self) -> ReplicasInfo:
        return self.state.info

    # -- reads (event loop) ---------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return bool(self._isLeader())

    @property
    def leader_id(self) -> str | None:
        node = self._getLeader()
        return None if node is None else self._ids.get(str(node.address), str(node.address))

    @property
    def term(self) -> int:
        return int(self._getTerm())

    # -- proposing (event loop) -----------------------------------------------------------

    def propose(self, name: str, *args: Any) -> asyncio.Future[Outcome]:
        """Append a command; the future has its Outcome once it is applied
        here, or RaftFailure."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Outcome] = loop.create_future()

        def settle(result: Any, error: int) -> None:
            if fut.done():
                return
            if error == FAIL_REASON.SUCCESS and isinstance(result, Outcome):
                fut.set_result(result)
            else:
                fut.set_exception(RaftFailure(error))

        def callback(result: Any, error: int) -> None:  # pysyncobj's thread
            # RuntimeError: the loop is closed, nobody waits any more
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, result, error)

        getattr(self.state, name)(*args, callback=callback)
        return fut

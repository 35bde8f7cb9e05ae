"""The RocketMQ 5 controller (controller mode: automatic master failover).

A broker group (brokerName within a cluster) is a master and its slaves.
Three (or five) controllers keep, per group, the replicas and their broker
ids and addresses, the master, masterEpoch, the SyncStateSet and
syncStateSetEpoch, replicated by Raft; the Raft leader hears broker
heartbeats and, when a master goes silent, elects a new one from the alive
SyncStateSet members (any alive replica with enableElectUncleanMaster).

  config.py      ControllerConfig: RocketMQ's controller.conf keys
  protocol.py    THE wire spec of the controller request codes + codecs
  replicas.py    the replicated state and its deterministic apply methods
  raft.py        ControllerRaft: pysyncobj SyncObj, the only thread boundary
  heartbeat.py   broker liveness (leader-local) and the election policy
  controller.py  Controller: processors, failover scan, peer-list check
  client.py      ControllerClient: what the broker calls

Run: `pyrmq controller -c controller.conf`, or in the name server with
`enableControllerInNamesrv=true` in `pyrmq namesrv -c namesrv.conf`.

Why pysyncobj for Raft, and not etcd
------------------------------------
RocketMQ embeds its Raft (DLedger, or JRaft) in the controller process; the
Python equivalent is an embedded Raft library. pysyncobj (PyPI, pure
Python, MIT, a pure wheel) is pip-installed with pyrmq: users run nothing
else and the controller stays one process with one config file, as in
RocketMQ. etcd (Debian etcd-server) is a battle-tested Raft store, but it is
an external daemon to deploy, secure, monitor and upgrade beside every
controller group, and a gRPC client dependency; its failure and version
modes would become ours, and "the controller is a peer list in
controller.conf" would no longer hold.

pysyncobj's limits, and what we do about them:
* It runs its own thread (autoTick) and calls back from it; raft.py bridges
  with loop.call_soon_threadsafe and never blocks the loop.
* It speaks its own TCP protocol on its own port: the controllerDLegerPeers
  addresses are Raft ports, and listenPort is a separate remoting port
  (DLedger shares one). Peers learn each other's remoting address through
  the log (members).
* Entries and snapshots are pickled: peers must trust each other; keep the
  Raft ports on a private network (pysyncobj's `password` option, which
  needs `cryptography`, is not wired up yet).
* It does not compare peer lists: controller.py does (a refusing ERROR line).
* No pre-vote and no read index: a controller cut off from the majority
  keeps leading for LEADER_FALLBACK_TIMEOUT (4 s) before stepping down; a
  change it accepts in that time does not commit and the broker gets an
  error. Reads are served by the leader from applied state, like RocketMQ's
  DLedger controller with isProcessReadEvent=false.
* The journal is pysyncobj's mmap'ed file journal, msync'ed about once a
  second rather than per entry: a power loss of a majority of the machines
  can lose the last entries; a process crash (SIGKILL) cannot.
* Membership is static (dynamicMembershipChange off): changing the peer list
  means a restart of every controller with the new list.
"""

from pyrmq.controller.client import ControllerClient, ControllerMetadata, ReplicaInfo
from pyrmq.controller.config import ControllerConfig, load_controller_conf
from pyrmq.controller.controller import Controller

__all__ = [
    "Controller",
    "ControllerClient",
    "ControllerConfig",
    "ControllerMetadata",
    "ReplicaInfo",
    "load_controller_conf",
]

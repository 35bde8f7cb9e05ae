"""A Linux network namespace joined to ours by a veth pair, for faults the
kernel makes real: a partition that drops packets (no RST, no FIN; TCP
retransmits into the void until the link heals) and half-open connections
(a peer whose host vanished).

    ns = NetNs.create("part")          # root: 10.213.N.1  <->  ns: 10.213.N.2
    try:
        subprocess.Popen(ns.argv([sys.executable, ...]))   # runs inside it
        ns.partition()                 # link down: packets dropped both ways
        ns.heal()
    finally:
        ns.delete()

Needs root and `ip` (iproute2); `NetNs.unavailable()` says why not. The
inner side's MAC is pinned in our neighbour table, so while partitioned
even a new connection's SYN vanishes (no ARP failure, no "no route to
host"): a black hole, as a cut cable or a dead switch port looks. Only
namespaces and links this module created are ever deleted, by name."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import threading

_SUBNET = "10.213"
_lock = threading.Lock()
_count = 0


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=10)


class NetNs:
    """One namespace `name` with the veth pair `outer`/`inner`."""

    def __init__(self, tag: str) -> None:
        global _count
        with _lock:
            _count += 1
            n = (os.getpid() * 7 + _count) % 250 + 1
        self.name = f"pyrmq-{tag}-{os.getpid()}-{_count}"
        self.outer = f"vo{os.getpid() % 100000}x{_count}"
        self.inner = f"vi{os.getpid() % 100000}x{_count}"
        self.outer_ip = f"{_SUBNET}.{n}.1"
        self.inner_ip = f"{_SUBNET}.{n}.2"
        self._created = False

    @staticmethod
    def unavailable() -> str | None:
        """None when namespaces can be made here, else the reason."""
        if sys.platform != "linux":
            return "network namespaces are Linux-only"
        if os.geteuid() != 0:
            return "network namespaces need root"
        if shutil.which("ip") is None:
            return "iproute2's ip is not installed"
        probe = NetNs("probe")
        try:
            probe._setup()
        except (subprocess.SubprocessError, OSError) as e:
            detail = getattr(e, "stderr", "") or str(e)
            return f"cannot create a network namespace: {detail.strip()}"
        finally:
            probe.delete()
        return None

    @classmethod
    def create(cls, tag: str) -> NetNs:
        ns = cls(tag)
        try:
            ns._setup()
        except BaseException:
            ns.delete()
            raise
        return ns

    def _setup(self) -> None:
        self._created = True
        _ip("netns", "add", self.name)
        _ip("link", "add", self.outer, "type", "veth", "peer", "name", self.inner)
        _ip("link", "set", self.inner, "netns", self.name)
        _ip("addr", "add", f"{self.outer_ip}/30", "dev", self.outer)
        _ip("link", "set", self.outer, "up")
        self.exec("ip", "addr", "add", f"{self.inner_ip}/30", "dev", self.inner)
        self.exec("ip", "link", "set", self.inner, "up")
        self.exec("ip", "link", "set", "lo", "up")
        self._pin()

    def _pin(self) -> None:
        # both neighbours pinned, so a partition never turns into an ARP
        # failure (EHOSTUNREACH) on either side: packets just vanish
        mac_in = self.exec("cat", f"/sys/class/net/{self.inner}/address").stdout.strip()
        mac_out = pathlib.Path(f"/sys/class/net/{self.outer}/address").read_text().strip()
        _ip("neigh", "replace", self.inner_ip, "lladdr", mac_in, "dev", self.outer,
            "nud", "permanent")  # fmt: skip
        self.exec("ip", "neigh", "replace", self.outer_ip, "lladdr", mac_out, "dev",
                  self.inner, "nud", "permanent")  # fmt: skip

    def argv(self, argv: list[str]) -> list[str]:
        """argv run inside the namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def exec(self, *argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(list(argv)), capture_output=True, text=True, check=True, timeout=10
        )

    def partition(self) -> None:
        """Take the inner link down: every packet either way is dropped."""
        self.exec("ip", "link", "set", self.inner, "down")

    def heal(self) -> None:
        self.exec("ip", "link", "set", self.inner, "up")
        self._pin()  # taking a link down flushes its neighbour entries

    def delete(self) -> None:
        """Remove the namespace and the veth pair (idempotent); processes
        still inside must be ended by their starter first."""
        if not self._created:
            return
        _ip("netns", "del", self.name, check=False)
        _ip("link", "del", self.outer, check=False)
        self._created = False

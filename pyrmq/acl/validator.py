"""PlainAccessValidator: the broker's check of every request against
plain_acl.yml (RocketMQ's PlainAccessValidator + PlainPermissionManager),
and the watch that reloads the file when it changes.

The check, in RocketMQ 4.x's order; the first refusal is a NoPermissionError
(response NO_PERMISSION, 16) whose remark names the account, the resource
and the right, and the request goes no further (nothing stored, no state
changed):

1. a peer in globalWhiteRemoteAddresses passes;
2. no AccessKey (or "": the C++ client without credentials) is refused, and
   so is an access key no account has;
3. a peer in the account's whiteRemoteAddress passes (no signature needed);
4. the Signature must match (signing.py says what is signed);
5. an admin code (permission.ADMIN_CODES) needs `admin: true`;
6. each resource the request needs (permission.needed_resources) needs its
   right: the account's entry for it when it has one (an explicit DENY is
   final), else its defaultTopicPerm / defaultGroupPerm; an admin account
   with no topicPerms and no groupPerms has every right.

Everything a check reads is compiled once per (re)load: an account's HMAC
prototype, its resource map, its address matcher. The watch polls the
file's (mtime, size, inode) every `check_interval` seconds, a stat on the
event loop; the read and parse of a changed file run in an executor. A
file that does not load keeps the last good config and is logged once per
version of the file; at start it is an error (AclConfigError).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import json
import logging
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from pyrmq.acl.config import (
    AclConfig,
    AclConfigError,
    PlainAccessConfig,
    read_plain_acl,
    resource_perms,
    write_plain_acl,
)
from pyrmq.acl.permission import (
    ADMIN_CODES,
    ResourceError,
    check_permission,
    is_group,
    needed_resources,
    parse_perm,
    perm_text,
)
from pyrmq.acl.remote_address import Matcher, normalize_ip, remote_address_matcher
from pyrmq.acl.signing import (
    ACCESS_KEY,
    GRPC_AUTH_SCHEME,
    SIGNATURE,
    UNIQUE_MSG_QUERY_FLAG,
    HmacSha1,
    grpc_signature,
    mac_for,
    parse_grpc_authorization,
    signature,
)
from pyrmq.common.errors import NoPermissionError


class AclAuthenticationError(NoPermissionError):
    """A request whose signer is unknown or whose signature is wrong (the
    5.x proxy answers it UNAUTHORIZED; a permission it lacks is FORBIDDEN)."""


log = logging.getLogger("pyrmq.acl")

#: seconds between two looks at plain_acl.yml (RocketMQ's FileWatchService: 500 ms)
DEFAULT_CHECK_INTERVAL = 0.5
#: peers whose normalized address is cached (cleared when full)
_IP_CACHE_MAX = 4096


@dataclasses.dataclass(frozen=True, slots=True)
class PlainAccessResource:
    """One account as the check uses it (compiled from PlainAccessConfig)."""

    access_key: str
    mac: HmacSha1
    admin: bool
    default_topic_perm: int
    default_group_perm: int
    perms: Mapping[str, int]
    white: Matcher

    @classmethod
    def compile(cls, acc: PlainAccessConfig) -> PlainAccessResource:
        perms = resource_perms(acc.topic_perms)
        perms.update({f"%RETRY%{g}": p for g, p in resource_perms(acc.group_perms).items()})
        return cls(
            acc.access_key,
            mac_for(acc.secret_key),
            acc.admin,
            parse_perm(acc.default_topic_perm),
            parse_perm(acc.default_group_perm),
            perms,
            remote_address_matcher(acc.white_remote_address),
        )


@dataclasses.dataclass(frozen=True, slots=True)
class DataVersion:
    """RocketMQ's DataVersion: when and how many times the config changed."""

    timestamp: int
    counter: int

    def to_json(self) -> str:
        return json.dumps({"timestamp": self.timestamp, "counter": self.counter})

    def next(self) -> DataVersion:
        return DataVersion(int(time.time() * 1000), self.counter + 1)


def _stat_key(st: os.stat_result) -> tuple[int, int, int]:
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _describe(resource: str) -> str:
    return f"group {resource[7:]}" if is_group(resource) else f"topic {resource}"


class PlainAccessValidator:
    """Holds the compiled plain_acl.yml of one broker; `validate` checks a
    request. Build it with `await PlainAccessValidator.open(path)`."""

    def __init__(self, path: str, config: AclConfig, st: os.stat_result | None = None) -> None:
        self.path = path
        self.check_interval = DEFAULT_CHECK_INTERVAL
        self.version = DataVersion(int(time.time() * 1000), 0)
        self.config = AclConfig()
        self._accounts: dict[str, PlainAccessResource] = {}
        self._global: tuple[Matcher, ...] = ()
        self._ips: dict[str, str] = {}
        self._seen: tuple[int, int, int] | None = None
        self._bad_seen: tuple[int, int, int] | None = None
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.reloads = 0
        self.apply(config, st)

    @classmethod
    async def open(cls, path: str) -> PlainAccessValidator:
        """Load path (in an executor); AclConfigError when it is missing or
        malformed: a broker with aclEnable=true does not start without it."""
        loop = asyncio.get_running_loop()
        config, st = await loop.run_in_executor(None, read_plain_acl, path)
        return cls(path, config, st)

    def apply(self, config: AclConfig, st: os.stat_result | None = None) -> None:
        """Compile and switch to config (all or nothing)."""
        accounts = {a.access_key: PlainAccessResource.compile(a) for a in config.accounts}
        white = tuple(remote_address_matcher(w) for w in config.global_white_remote_addresses)
        self.config, self._accounts, self._global = config, accounts, white
        self.version = self.version.next()
        if st is not None:
            self._seen = _stat_key(st)

    # -- the check ------------------------------------------------------------------------

    def _ip(self, peer: str) -> str:
        ip = self._ips.get(peer)
        if ip is None:
            # "ip:port" as Connection.peer writes it (IPv6 without brackets)
            host = peer.rpartition(":")[0] if ":" in peer else peer
            try:
                ip = normalize_ip(host)
            except ValueError:
                ip = host
            if len(self._ips) >= _IP_CACHE_MAX:
                self._ips.clear()
            self._ips[peer] = ip
        return ip

    def validate(self, peer: str, code: int, ext: Mapping[str, str], body: bytes) -> None:
        """Raise NoPermissionError unless the request may be served. `peer`
        is the connection's "ip:port"."""
        acc = self._account(self._ip(peer), ext.get(ACCESS_KEY), f"request code {code}")
        if acc is None:
            return
        ak = acc.access_key
        if not self._signed(acc, ext, body):
            raise NoPermissionError(
                f"Check signature failed for accessKey={ak} (request code {code})"
            )
        if code in ADMIN_CODES and not acc.admin:
            raise NoPermissionError(
                f"Need admin permission for request code={code}, but accessKey={ak} is not"
            )
        try:
            need = needed_resources(code, ext, body)
        except ResourceError as e:
            raise NoPermissionError(f"accessKey={ak}, request code {code}: {e}") from None
        self._authorize(acc, need, f"request code {code}")

    def _account(
        self,
        ip: str,
        ak: str | None,
        what: str,
        refuse: type[NoPermissionError] = NoPermissionError,
    ) -> PlainAccessResource | None:
        """The account a request is signed for; None when its address is
        white-listed (globally or for that account: let through unchecked,
        as RocketMQ does)."""
        for white in self._global:
            if white(ip):
                return None
        if not ak:
            raise refuse(
                f"No accessKey is configured: {what} from {ip} is not signed "
                "and ACL is enabled on this broker"
            )
        acc = self._accounts.get(ak)
        if acc is None:
            raise refuse(f"No acl config for accessKey={ak} ({what})")
        return None if acc.white(ip) else acc

    def _authorize(self, acc: PlainAccessResource, need: Mapping[str, int], what: str) -> None:
        if not need or (acc.admin and not acc.perms):
            return
        perms = acc.perms
        for resource, right in need.items():
            owned = perms.get(resource)
            if owned is None:
                owned = acc.default_group_perm if is_group(resource) else acc.default_topic_perm
            if not check_permission(right, owned):
                raise NoPermissionError(
                    f"No permission for {_describe(resource)}: accessKey={acc.access_key} "
                    f"needs {perm_text(right)}, has {perm_text(owned)} ({what})"
                )

    def validate_grpc(
        self, peer: str, metadata: Mapping[str, str], need: Mapping[str, int], what: str
    ) -> None:
        """A 5.x gRPC request (signing.py: x-mq-date-time, authorization):
        AclAuthenticationError when it is not signed by a known account,
        NoPermissionError when the account lacks a right in `need`
        (resource -> PUB/SUB bits, groups as %RETRY%<group>)."""
        auth = parse_grpc_authorization(metadata.get("authorization", ""))
        acc = self._account(
            self._ip(peer), auth.get("Credential"), f"{what} ({GRPC_AUTH_SCHEME})",
            AclAuthenticationError,
        )  # fmt: skip
        if acc is None:
            return
        sig = auth.get("Signature", "")
        date_time = metadata.get("x-mq-date-time", "")
        if (
            not sig
            or not date_time
            or not hmac.compare_digest(grpc_signature(acc.mac, date_time), sig.lower())
        ):
            raise AclAuthenticationError(
                f"Check signature failed for accessKey={acc.access_key} ({what})"
            )
        self._authorize(acc, need, what)

    @staticmethod
    def _signed(acc: PlainAccessResource, ext: Mapping[str, str], body: bytes) -> bool:
        sig = ext.get(SIGNATURE)
        if not sig or not isinstance(sig, str) or not sig.isascii():
            return False
        if hmac.compare_digest(signature(acc.mac, ext, body, leave_out=UNIQUE_MSG_QUERY_FLAG), sig):
            return True
        if UNIQUE_MSG_QUERY_FLAG in ext:  # Java's client signs it, its broker does not
            return hmac.compare_digest(signature(acc.mac, ext, body), sig)
        return False

    # -- the watch --------------------------------------------------------------------------

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._watch_loop(), name="pyrmq:acl:watch")

    async def shutdown(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _watch_loop(self) -> None:
        while True:
            await asyncio.sleep(self.check_interval)
            try:
                await self.check_file()
            except Exception:
                log.exception("acl: checking %s failed", self.path)

    async def check_file(self) -> bool:
        """Reload plain_acl.yml if it changed since the last load; whether
        a new config is now in force."""
        try:
            key = _stat_key(os.stat(self.path))
        except OSError as e:
            if self._bad_seen != (0, 0, 0):
                self._bad_seen = (0, 0, 0)
                log.error("acl: %s: %s; keeping the last good config", self.path, e.strerror)
            return False
        if key == self._seen or key == self._bad_seen:
            return False
        async with self._lock:
            loop = asyncio.get_running_loop()
            try:
                config, st = await loop.run_in_executor(None, read_plain_acl, self.path)
                self.apply(config, st)
            except (AclConfigError, ValueError) as e:
                self._bad_seen = key
                log.error("acl: %s; keeping the last good config", e)
                return False
        self._bad_seen = None
        self.reloads += 1
        log.info(
            "acl: reloaded %s (%d accounts, version %d)",
            self.path,
            len(self.config.accounts),
            self.version.counter,
        )
        return True

    # -- updates (mqadmin's ACL commands) ---------------------------------------------------

    async def _rewrite(self, change: Any) -> None:
        """Read the file, apply change(config) -> config, write it back
        atomically and switch to it; AclConfigError when the file or the
        result does not load (nothing is written then)."""
        async with self._lock:
            loop = asyncio.get_running_loop()
            current, _ = await loop.run_in_executor(None, read_plain_acl, self.path)
            new: AclConfig = change(current)
            for i, acc in enumerate(new.accounts):
                acc.check(f"account #{i + 1} (accessKey {acc.access_key!r})")
            for w in new.global_white_remote_addresses:
                try:
                    remote_address_matcher(w)
                except ValueError as e:
                    raise AclConfigError(str(e)) from None
            st = await loop.run_in_executor(None, write_plain_acl, self.path, new)
            self.apply(new, st)
            self._bad_seen = None

    async def update_account(self, fields: Mapping[str, str | None]) -> None:
        """Create or update an account from UPDATE_AND_CREATE_ACL_CONFIG's
        fields (RocketMQ's keys; absent ones keep the account's value)."""
        ak = fields.get("accessKey") or ""

        def change(cfg: AclConfig) -> AclConfig:
            old = cfg.account(ak)
            if old is None:
                if not fields.get("secretKey"):
                    raise AclConfigError(f"accessKey {ak!r} is new: give its secretKey")
                old = PlainAccessConfig(ak, fields["secretKey"] or "")
            upd: dict[str, Any] = {}
            for key, attr in (
                ("secretKey", "secret_key"),
                ("whiteRemoteAddress", "white_remote_address"),
                ("defaultTopicPerm", "default_topic_perm"),
                ("defaultGroupPerm", "default_group_perm"),
            ):
                if fields.get(key) is not None:
                    upd[attr] = fields[key]
            if fields.get("admin") is not None:
                upd["admin"] = str(fields["admin"]).strip().lower() == "true"
            for key, attr in (("topicPerms", "topic_perms"), ("groupPerms", "group_perms")):
                if fields.get(key) is not None:
                    upd[attr] = tuple(x.strip() for x in str(fields[key]).split(",") if x.strip())
            acc = dataclasses.replace(old, **upd)
            others = [a for a in cfg.accounts if a.access_key != ak]
            pos = next((i for i, a in enumerate(cfg.accounts) if a.access_key == ak), None)
            if pos is None:
                others.append(acc)
            else:
                others.insert(pos, acc)
            return dataclasses.replace(cfg, accounts=tuple(others))

        if len(ak) < 7:
            raise AclConfigError("accessKey must be longer than 6 characters")
        await self._rewrite(change)

    async def delete_account(self, access_key: str) -> None:
        def change(cfg: AclConfig) -> AclConfig:
            if cfg.account(access_key) is None:
                raise AclConfigError(f"no account with accessKey {access_key!r}")
            keep = tuple(a for a in cfg.accounts if a.access_key != access_key)
            return dataclasses.replace(cfg, accounts=keep)

        await self._rewrite(change)

    async def update_global_white_addrs(self, addrs: Sequence[str]) -> None:
        clean = tuple(a.strip() for a in addrs if a.strip())
        await self._rewrite(
            lambda cfg: dataclasses.replace(cfg, global_white_remote_addresses=clean)
        )

    def config_json(self) -> dict[str, Any]:
        """GET_BROKER_CLUSTER_ACL_CONFIG's body (RocketMQ's AclConfig)."""
        return {
            "globalWhiteAddrs": list(self.config.global_white_remote_addresses),
            "plainAccessConfigs": [a.to_yaml() for a in self.config.accounts],
        }

"""plain_acl.yml: RocketMQ's ACL 1.0 accounts file (PlainPermissionManager's
YAML), read, checked and written back.

    globalWhiteRemoteAddresses:     # peers that need no account at all
      - 10.10.103.*
      - 192.168.0.*
    accounts:
      - accessKey: RocketMQ         # > 6 characters, unique
        secretKey: 12345678         # > 6 characters
        whiteRemoteAddress:         # this account's peers skip the signature
        admin: false                # may it use the admin codes (permission.py)
        defaultTopicPerm: DENY      # topics not listed below (missing: DENY)
        defaultGroupPerm: SUB       # groups not listed below (missing: DENY)
        topicPerms:
          - topicA=DENY
          - topicB=PUB|SUB
          - topicC=SUB
        groupPerms:
          - groupA=DENY
          - groupB=PUB|SUB

Address forms: remote_address.py. Rights: permission.py. Other top-level
keys are kept as they are when pyrmq writes the file back (the mqadmin ACL
commands); comments are not (nor are they by RocketMQ).

pyrmq is stricter than RocketMQ where RocketMQ silently reads a mistake as
"deny": a permission that is not PUB, SUB, PUB|SUB, SUB|PUB or DENY, a
white address of no known form, a duplicate access key, a value of the
wrong type: each is an AclConfigError naming the file, the account and the
key. YAML anchors and aliases are refused (a few bytes of aliases can
stand for millions of nodes), and so is a file over MAX_FILE_BYTES.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from typing import Any

import yaml

from pyrmq.acl.permission import parse_perm
from pyrmq.acl.remote_address import remote_address_matcher
from pyrmq.common.errors import ClientError

#: a plain_acl.yml larger than this is refused (RocketMQ's are a few KiB)
MAX_FILE_BYTES = 4 * 1024 * 1024
#: RocketMQ: access and secret keys must be longer than 6 characters
MIN_KEY_LEN = 7
PLAIN_ACL_FILE = "plain_acl.yml"


class AclConfigError(ClientError):
    """plain_acl.yml (or an ACL update) that cannot be used."""


class _NoAliasLoader(yaml.SafeLoader):
    """SafeLoader that refuses anchors and aliases."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(
                None, None, "anchors and aliases are not allowed here", mark
            )
        return super().compose_node(parent, index)


@dataclasses.dataclass(frozen=True, slots=True)
class PlainAccessConfig:
    """One account (RocketMQ PlainAccessConfig)."""

    access_key: str
    secret_key: str
    white_remote_address: str = ""
    admin: bool = False
    default_topic_perm: str | None = None
    default_group_perm: str | None = None
    topic_perms: tuple[str, ...] = ()
    group_perms: tuple[str, ...] = ()

    def check(self, where: str) -> None:
        """AclConfigError when a key or right is malformed."""
        for name, key in (("accessKey", self.access_key), ("secretKey", self.secret_key)):
            if len(key) < MIN_KEY_LEN:
                raise AclConfigError(f"{where}: {name} must be longer than 6 characters")
        try:
            remote_address_matcher(self.white_remote_address)
            parse_perm(self.default_topic_perm)
            parse_perm(self.default_group_perm)
            resource_perms(self.topic_perms)
            resource_perms(self.group_perms)
        except ValueError as e:
            raise AclConfigError(f"{where}: {e}") from None

    def to_yaml(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "accessKey": self.access_key,
            "secretKey": self.secret_key,
            "whiteRemoteAddress": self.white_remote_address,
            "admin": self.admin,
        }
        if self.default_topic_perm is not None:
            out["defaultTopicPerm"] = self.default_topic_perm
        if self.default_group_perm is not None:
            out["defaultGroupPerm"] = self.default_group_perm
        if self.topic_perms:
            out["topicPerms"] = list(self.topic_perms)
        if self.group_perms:
            out["groupPerms"] = list(self.group_perms)
        return out


@dataclasses.dataclass(frozen=True, slots=True)
class AclConfig:
    """The whole file: global white list, accounts, and any other top-level
    keys (kept for writing back)."""

    global_white_remote_addresses: tuple[str, ...] = ()
    accounts: tuple[PlainAccessConfig, ...] = ()
    extra: tuple[tuple[str, Any], ...] = ()

    def account(self, access_key: str) -> PlainAccessConfig | None:
        return next((a for a in self.accounts if a.access_key == access_key), None)

    def to_yaml(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.extra)
        out["globalWhiteRemoteAddresses"] = list(self.global_white_remote_addresses)
        out["accounts"] = [a.to_yaml() for a in self.accounts]
        return out


def resource_perms(items: Iterable[str]) -> dict[str, int]:
    """["topicA=PUB|SUB", ...] -> {"topicA": PUB | SUB}; ValueError when an
    item is not name=PERM."""
    out: dict[str, int] = {}
    for item in items:
        name, sep, perm = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"{item!r}: expected name=PERM (PUB, SUB, PUB|SUB or DENY)")
        out[name.strip()] = parse_perm(perm)
    return out


def _text(value: Any, where: str, key: str, *, required: bool = False) -> str | None:
    if value is None:
        if required:
            raise AclConfigError(f"{where}: {key} is missing")
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise AclConfigError(f"{where}: {key} must be text, not {type(value).__name__}")
    return str(value)


def _texts(value: Any, where: str, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):  # RocketMQ's admin header form: "a=PUB,b=SUB"
        return tuple(x.strip() for x in value.split(",") if x.strip())
    if not isinstance(value, list):
        raise AclConfigError(f"{where}: {key} must be a list, not {type(value).__name__}")
    return tuple(_text(v, where, f"{key} item", required=True) or "" for v in value)


def _bool(value: Any, where: str, key: str) -> bool:
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise AclConfigError(f"{where}: {key} must be true or false, not {value!r}")


def account_from_yaml(item: Any, where: str) -> PlainAccessConfig:
    if not isinstance(item, dict):
        raise AclConfigError(f"{where}: an account must be a mapping of keys")
    acc = PlainAccessConfig(
        access_key=_text(item.get("accessKey"), where, "accessKey", required=True) or "",
        secret_key=_text(item.get("secretKey"), where, "secretKey", required=True) or "",
        white_remote_address=_text(item.get("whiteRemoteAddress"), where, "whiteRemoteAddress")
        or "",
        admin=_bool(item.get("admin"), where, "admin"),
        default_topic_perm=_text(item.get("defaultTopicPerm"), where, "defaultTopicPerm"),
        default_group_perm=_text(item.get("defaultGroupPerm"), where, "defaultGroupPerm"),
        topic_perms=_texts(item.get("topicPerms"), where, "topicPerms"),
        group_perms=_texts(item.get("groupPerms"), where, "groupPerms"),
    )
    acc.check(f"{where} (accessKey {acc.access_key!r})")
    return acc


def parse_plain_acl(text: str | bytes, source: str = PLAIN_ACL_FILE) -> AclConfig:
    """Parse and check a plain_acl.yml; AclConfigError saying what is wrong
    and where. An empty document is a config with no account."""
    if len(text) > MAX_FILE_BYTES:
        raise AclConfigError(f"{source}: larger than {MAX_FILE_BYTES} bytes")
    try:
        data = yaml.load(text, Loader=_NoAliasLoader)
    except yaml.YAMLError as e:
        raise AclConfigError(f"{source}: not valid YAML: {' '.join(str(e).split())}") from None
    except (RecursionError, UnicodeDecodeError, ValueError) as e:
        raise AclConfigError(f"{source}: not valid YAML: {type(e).__name__}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise AclConfigError(f"{source}: expected a mapping with accounts, not a YAML scalar/list")
    white = _texts(data.get("globalWhiteRemoteAddresses"), source, "globalWhiteRemoteAddresses")
    for w in white:
        try:
            remote_address_matcher(w)
        except ValueError as e:
            raise AclConfigError(f"{source}: globalWhiteRemoteAddresses: {e}") from None
    raw_accounts = data.get("accounts")
    if raw_accounts is None:
        raw_accounts = []
    if not isinstance(raw_accounts, list):
        raise AclConfigError(f"{source}: accounts must be a list")
    accounts = []
    seen: set[str] = set()
    for i, item in enumerate(raw_accounts):
        acc = account_from_yaml(item, f"{source}: account #{i + 1}")
        if acc.access_key in seen:
            raise AclConfigError(f"{source}: accessKey {acc.access_key!r} appears twice")
        seen.add(acc.access_key)
        accounts.append(acc)
    extra = tuple(
        (str(k), v) for k, v in data.items() if k not in ("globalWhiteRemoteAddresses", "accounts")
    )
    return AclConfig(white, tuple(accounts), extra)


def read_plain_acl(path: str) -> tuple[AclConfig, os.stat_result]:
    """Blocking (run it in an executor): read and parse path; the stat the
    read saw, so a watcher knows which version it holds."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if st.st_size > MAX_FILE_BYTES:
                raise AclConfigError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise AclConfigError(f"cannot read {path}: {e.strerror or e}") from None
    return parse_plain_acl(raw, path), st


def dump_plain_acl(config: AclConfig) -> str:
    return yaml.safe_dump(config.to_yaml(), sort_keys=False, allow_unicode=True)


def write_plain_acl(path: str, config: AclConfig) -> os.stat_result:
    """Blocking (run it in an executor): write path atomically (a temporary
    file beside it, fsync, rename, fsync of the folder); its new stat."""
    data = dump_plain_acl(config).encode()
    folder = os.path.dirname(path) or "."
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.replace(tmp, path)
    except OSError:
        os.unlink(tmp)
        raise
    dfd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return os.stat(path)

"""Small JSON state files (topics, consumer offsets, delay offsets, KV
config), written atomically: temp file, fsync, rename, fsync of the folder,
so a save never leaves a torn file. Like RocketMQ's ConfigManager, the
broker's state files (JsonStateFile) also keep the previous save as
<file>.bak: a file damaged later (a bad disk block, a truncating copy, a
hand edit) is moved aside as <file>.damaged-<time> and the .bak is loaded,
with an error in the log naming both."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from typing import Any, Generic, Protocol, TypeVar

from pyrmq.common.errors import BrokerSystemError, ClientError, InvalidParameterError

log = logging.getLogger("pyrmq.config")
T = TypeVar("T")
U = TypeVar("U")
#: what a damaged state file raises: not JSON (ClientError, from read_json),
#: or JSON whose shape or values the caller's parse refuses
_DAMAGED = (ClientError, ValueError, TypeError, KeyError, AttributeError)


def _keep_backup(path: str) -> None:
    """<path>.bak becomes the file now at path (before it is replaced): a
    hard link renamed into place, so path itself never goes missing."""
    bak, tmp = f"{path}.bak", f"{path}.bak.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    try:
        os.link(path, tmp)
    except FileNotFoundError:
        return  # no previous save
    except OSError:  # a filesystem without hard links
        shutil.copyfile(path, tmp)
    os.replace(tmp, bak)


def write_json_atomic(path: str, data: Any, *, backup: bool = False) -> None:
    """Blocking: call from an executor thread, not the event loop. With
    backup, the file being replaced is kept as <path>.bak."""
    write_bytes_atomic(path, json.dumps(data, indent=1, sort_keys=True).encode(), backup=backup)


def write_bytes_atomic(path: str, raw: bytes, *, backup: bool = False, mode: int = 0o644) -> None:
    """Blocking: raw becomes the whole of path, or (on any OSError, which is
    raised) path keeps its old content: <path>.tmp written and fsynced,
    renamed over path, the folder fsynced."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    if backup:
        _keep_backup(path)
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        try:
            os.fchmod(fd, mode)  # exactly the old file's bits, whatever the umask
            view = memoryview(raw)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    dfd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def read_json(path: str) -> Any | None:
    """The file's JSON, or None when it does not exist. A file that is not
    JSON raises ClientError naming it (we never silently start empty over
    somebody's state)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    try:
        return json.loads(raw)
    except ValueError as e:
        raise ClientError(
            f"{path} is not valid JSON ({e}); fix or move it away to start without it"
        ) from None


def parse_properties_text(text: str) -> dict[str, str]:
    """Java Properties text (key=value or key: value lines, # and !
    comments, surrounding blanks trimmed); ValueError naming a line that is
    neither."""
    out: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s[0] in "#!":
            continue
        seps = [i for i in (s.find("="), s.find(":")) if i > 0]
        if not seps:
            raise ValueError(f"line {n}: expected key=value, got {line!r}")
        i = min(seps)
        out[s[:i].strip()] = s[i + 1 :].strip()
    return out


def read_properties(path: str) -> dict[str, str]:
    """A Java .properties file (broker.conf), as parse_properties_text reads it."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ClientError(f"cannot read config file {path}: {e.strerror}") from None
    try:
        return parse_properties_text(text)
    except ValueError as e:
        raise ClientError(f"{path}:{str(e).removeprefix('line ')}") from None


def _property_key(line: str) -> tuple[str, int, int] | None:
    """(key, start, end of the separator) of a key=value / key: value line
    as read_properties reads it; None for blank, comment and other lines."""
    s = line.strip()
    if not s or s[0] in "#!":
        return None
    seps = [i for i in (line.find("="), line.find(":")) if i > 0]
    if not seps:
        return None
    i = min(seps)
    key = line[:i].strip()
    return (key, i, i + 1) if key else None


def update_properties_text(
    text: str, changes: dict[str, str], spellings: dict[str, set[str]], note: str = ""
) -> str:
    """text (a .properties file) with changes (key -> new value) made in
    place: every line whose key is a spelling of a changed key
    (spellings[key], e.g. camelCase and snake_case) gets the new value after
    its own key and separator; every other line, comment and blank stays as
    it was. Keys no line sets are appended (after `note` as a # comment)."""
    lines = text.splitlines(keepends=True)
    owner = {key: key for key in changes}
    owner.update({alias: key for key, names in spellings.items() for alias in names})
    seen: set[str] = set()
    for n, line in enumerate(lines):
        parsed = _property_key(line)
        if parsed is None:
            continue
        key = owner.get(parsed[0])
        if key is None or key not in changes:
            continue
        head = line[: parsed[2]]
        gap = line[parsed[2] : len(line) - len(line[parsed[2] :].lstrip(" \t"))]
        end = "\r\n" if line.endswith("\r\n") else "\n"
        lines[n] = f"{head}{gap}{changes[key]}{end}"
        seen.add(key)
    missing = [k for k in changes if k not in seen]
    if missing:
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        if note:
            lines.append(f"# {note}\n")
        lines += [f"{k}={changes[k]}\n" for k in missing]
    return "".join(lines)


def rewrite_properties_file(
    path: str, changes: dict[str, str], spellings: dict[str, set[str]], note: str = ""
) -> None:
    """Blocking (an executor thread): update_properties_text on the file at
    path, written atomically with its permission bits kept. OSError (the
    file or its folder unreadable, unwritable, a full disk) leaves the file
    as it was. A symbolic link is followed (the file it names is rewritten)."""
    path = os.path.realpath(path)
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    mode = os.stat(path).st_mode & 0o7777
    raw = update_properties_text(text, changes, spellings, note).encode("utf-8")
    write_bytes_atomic(path, raw, mode=mode)


class RuntimeConfig(Protocol[U]):
    """A server's settings that can change while it runs (the broker's
    BrokerRuntimeConfig, the name server's NamesrvRuntimeConfig)."""

    #: the config file it was started from (-c); None: updates live in memory
    config_path: str | None

    def prepare(self, changes: dict[str, str]) -> U:
        """What the changes would do, checked whole; nothing changed yet.
        Falsy when nothing would change. Raises a BrokerError naming what
        is refused."""
        ...

    def persist(self, update: U) -> None:
        """Blocking: the update written into config_path (OSError: the file
        is as it was)."""
        ...

    def apply(self, update: U) -> object:
        """Set the update on the running server."""
        ...


class ConfigUpdater(Generic[U]):
    """UPDATE_BROKER_CONFIG and UPDATE_NAMESRV_CONFIG, one procedure for
    both: the request's properties text is checked whole, written into the
    server's config file when it was started from one (in an executor
    thread, RocketMQ's Configuration.persist), then applied, one update at
    a time. A file that cannot be written changes nothing (RocketMQ applies
    first and only logs the failure)."""

    def __init__(self, config: RuntimeConfig[U], server: str, config_file: str) -> None:
        self.config = config
        #: "the broker", "the name server": for the remarks
        self._server = server
        #: "broker.conf", "namesrv.conf"
        self._config_file = config_file
        self._lock = asyncio.Lock()

    async def update(self, body: bytes) -> str | None:
        """Apply a request's body; the answer's remark (None: nothing to
        say). Raises InvalidParameterError for an unreadable body,
        BrokerSystemError when the file cannot be written, and what
        prepare raises."""
        try:
            changes = parse_properties_text(body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise InvalidParameterError(f"string2Properties error: {e}") from None
        if not changes:
            raise InvalidParameterError("the body names no config key to update")
        config = self.config
        async with self._lock:
            update = config.prepare(changes)
            path = config.config_path
            if path is not None and update:
                try:
                    await asyncio.get_running_loop().run_in_executor(
                        JsonStateFile.executor(), config.persist, update
                    )
                except OSError as e:
                    raise BrokerSystemError(
                        f"config not changed: cannot write {path}: {e.strerror or e}"
                    ) from None
            config.apply(update)
        if path is None and update:
            return (
                f"applied in memory only: {self._server} was started without a config file "
                f"(-c {self._config_file}), so a restart goes back to the old values"
            )
        return None


class JsonStateFile:
    """A JSON state file saved from a snapshot function on one background
    thread (RocketMQ ConfigManager.persist). Every save of every file goes
    through that one thread, in order, so two saves of a file never overlap
    (even when a caller is cancelled mid-save or shutdown saves right after)
    and the event loop never waits on the disk."""

    _executor: Any = None

    def __init__(self, path: str, snapshot: Any) -> None:
        self.path = path
        self._snapshot = snapshot

    @classmethod
    def executor(cls) -> Any:
        """The one thread config files are written on, in order."""
        return cls._pool()

    @classmethod
    def _pool(cls) -> Any:
        if cls._executor is None:
            from pyrmq.common.threads import single_thread_executor

            cls._executor = single_thread_executor("pyrmq-config")
        return cls._executor

    def load(self, parse: Callable[[Any], T] | None = None) -> T | Any | None:
        """The saved state, or None when there is none, through parse (the
        caller's reading of it, which raises ValueError, TypeError,
        KeyError or AttributeError on a state that makes no sense). A file
        that is not valid JSON or that parse refuses (damaged) is moved
        aside and the previous save (.bak) loaded instead; a missing file
        with a .bak (a save cannot cause that, a deletion can) loads the
        .bak too. Both are logged as errors: state may be one save old."""
        try:
            return self._read(self.path, parse)
        except FileNotFoundError:
            backup = self._load_backup(parse)
            if backup is not None:
                log.error("%s is missing: loaded the previous save (.bak)", self.path)
            return backup
        except _DAMAGED as e:
            aside = f"{self.path}.damaged-{time.strftime('%Y%m%d%H%M%S')}"
            os.replace(self.path, aside)
            backup = self._load_backup(parse)
            what = e if isinstance(e, ClientError) else f"{self.path} makes no sense ({e!r})"
            log.error(
                "%s (moved to %s); %s",
                what,
                aside,
                "loaded the previous save (.bak) instead"
                if backup is not None
                else "no usable previous save (.bak): starting without this state",
            )
            return backup

    @staticmethod
    def _read(path: str, parse: Callable[[Any], T] | None) -> T | Any:
        data = read_json(path)
        if data is None:
            raise FileNotFoundError(path)
        return data if parse is None else parse(data)

    def _load_backup(self, parse: Callable[[Any], T] | None) -> T | Any | None:
        try:
            return self._read(f"{self.path}.bak", parse)
        except FileNotFoundError:
            return None
        except _DAMAGED as e:
            log.error("%s.bak: %s", self.path, e)
            return None

    async def persist(self) -> None:
        """Save the current state; returns once it is on disk. Cancelling the
        caller does not cancel the save."""
        import asyncio

        fut = self._pool().submit(write_json_atomic, self.path, self._snapshot(), backup=True)
        await asyncio.shield(asyncio.wrap_future(fut))

    def persist_now(self) -> None:
        """Blocking save (shutdown): queued behind any save in progress."""
        self._pool().submit(write_json_atomic, self.path, self._snapshot(), backup=True).result()


def camel_case(name: str) -> str:
    """snake_case field name -> the Java camelCase key of broker.conf."""
    head, *rest = name.split("_")
    return head + "".join(p.capitalize() for p in rest)


def settings_from_properties(
    cls: Any, props: Any, aliases: dict[str, str] | None = None, converters: Any = None
) -> dict[str, Any]:
    """Keyword arguments for the settings dataclass cls from broker.conf-style
    properties: Java camelCase or snake_case keys (plus aliases), values
    converted to each field's type (bool: "true"; int; converters[type name]
    for the rest; str otherwise). A field named ..._ms also takes Java's
    name without the unit. Keys that are not fields are ignored."""
    import dataclasses

    fields = {f.name: f for f in dataclasses.fields(cls)}
    by_key = {camel_case(n): n for n in fields}
    # RocketMQ's own names carry no unit (flushIntervalCommitLog, syncFlushTimeout,
    # ...: milliseconds); pyrmq's fields say it (flush_interval_commit_log_ms)
    by_key.update({camel_case(n[:-3]): n for n in fields if n.endswith("_ms")})
    by_key.update(aliases or {})
    kwargs: dict[str, Any] = {}
    for key, raw in props.items():
        name = key if key in fields else by_key.get(key)
        if name is None:
            continue
        t = str(fields[name].type)
        value: Any
        try:
            if t == "bool":
                value = raw if isinstance(raw, bool) else str(raw).strip().lower() == "true"
            elif t == "int":
                value = int(str(raw).strip())
            elif converters and t in converters:
                value = converters[t](raw)
            else:
                value = str(raw).strip()
        except ValueError as e:
            raise ClientError(f"bad value for {key}: {raw!r} ({e})") from None
        kwargs[name] = value
    return kwargs

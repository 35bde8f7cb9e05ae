"""Reading request header fields (extFields, all strings on arrival) with a
clear error for a missing, non-integer or out-of-range value."""

from __future__ import annotations

from pyrmq.common.errors import BrokerSystemError
from pyrmq.remoting import RemotingCommand


def header_str(fields: dict[str, str], key: str, code: int) -> str:
    v = fields.get(key)
    if not v:
        raise BrokerSystemError(f"request code {code} lacks header field {key}")
    return v


def header_int(
    fields: dict[str, str],
    key: str,
    default: int | None = None,
    *,
    code: int = 0,
    error: type[Exception] = BrokerSystemError,
    bits: int = 64,
) -> int:
    """fields[key] as a signed integer of `bits` bits (Java's long, or int
    with bits=32); default when absent or empty (or an error when there is
    no default)."""
    raw = fields.get(key)
    if raw is None or raw == "":
        if default is None:
            raise error(f"request code {code} lacks header field {key}")
        return default
    try:
        v = int(raw)
    except ValueError:
        raise error(f"header field {key}={raw[:64]!r} is not an integer") from None
    if not -(1 << (bits - 1)) <= v < 1 << (bits - 1):
        raise error(f"header field {key}={raw[:64]!r} is out of the {bits}-bit range")
    return v


def field(cmd: RemotingCommand, key: str) -> str:
    """A required, non-empty header field of the request."""
    return header_str(cmd.ext_fields, key, cmd.code)


def int_field(cmd: RemotingCommand, key: str) -> int:
    """A required 64-bit integer header field of the request."""
    return header_int(cmd.ext_fields, key, code=cmd.code)


def queue_id_field(cmd: RemotingCommand) -> int:
    """The required queueId of the request: a Java int, so 32 bits (the
    store takes it as an int32; a larger value would escape as OverflowError)."""
    return header_int(cmd.ext_fields, "queueId", code=cmd.code, bits=32)

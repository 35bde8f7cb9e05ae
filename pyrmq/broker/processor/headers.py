"""Reading request header fields (extFields, all strings on arrival) with a
clear error for a missing, non-integer or out-of-range value."""

from __future__ import annotations

from pyrmq.common.errors import BrokerSystemError
from pyrmq.remoting import RemotingCommand

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


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
) -> int:
    """fields[key] as a 64-bit integer; default when absent or empty (or an
    error when there is no default)."""
    raw = fields.get(key)
    if raw is None or raw == "":
        if default is None:
            raise error(f"request code {code} lacks header field {key}")
        return default
    try:
        v = int(raw)
    except ValueError:
        raise error(f"header field {key}={raw[:64]!r} is not an integer") from None
    if not INT64_MIN <= v <= INT64_MAX:
        raise error(f"header field {key}={raw[:64]!r} is out of the 64-bit range")
    return v


def field(cmd: RemotingCommand, key: str) -> str:
    """A required, non-empty header field of the request."""
    return header_str(cmd.ext_fields, key, cmd.code)


def int_field(cmd: RemotingCommand, key: str) -> int:
    """A required 64-bit integer header field of the request."""
    return header_int(cmd.ext_fields, key, code=cmd.code)

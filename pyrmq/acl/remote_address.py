"""White lists of remote addresses (RocketMQ's RemoteAddressStrategyFactory).

The forms an account's `whiteRemoteAddress` or an entry of
`globalWhiteRemoteAddresses` may take:

  ""  (blank)                    matches nothing
  *   *.*.*.*   *:*:*:*:*:*:*:*  matches every address
  192.168.1.7                    one address (IPv6 too: compared expanded)
  192.168.1.7,192.168.1.9        a list of addresses
  192.168.1.{7,9,12}             a list in the last IPv4 group (IPv6: last group)
  192.168.1.*   192.168.*.*      one group any value, and every group after it `*`
  10.*.*.*
  192.168.1.10-20                one group a range (decimal; IPv6: hex), every
  192.168.0-7.*                  group after it `*`

Anything else is an error at load time, never a silent "matches nothing".
The peer's address is the connection's: an IPv4-mapped IPv6 address
(::ffff:10.0.0.1) is taken as its IPv4 form.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

Matcher = Callable[[str], bool]

_ALL = ("*", "*.*.*.*", "*:*:*:*:*:*:*:*")


class AddressSpecError(ValueError):
    """A white-list entry that is none of the accepted forms."""


def normalize_ip(ip: str) -> str:
    """IPv4 as is; IPv6 fully expanded, upper case; an IPv4-mapped IPv6
    address as its IPv4 form. ValueError when it is no address."""
    addr = ipaddress.ip_address(ip.strip().strip("[]"))
    if isinstance(addr, ipaddress.IPv6Address):
        if addr.ipv4_mapped is not None:
            return str(addr.ipv4_mapped)
        return addr.exploded.upper()
    return str(addr)


def _address(text: str, spec: str) -> str:
    try:
        return normalize_ip(text)
    except ValueError:
        raise AddressSpecError(f"white address {spec!r}: {text!r} is not an IP address") from None


def _never(_ip: str) -> bool:
    return False


def _always(_ip: str) -> bool:
    return True


def _braces(spec: str) -> Matcher:
    sep = ":" if ":" in spec else "."
    head, _, tail = spec.rpartition(sep)
    if not tail.startswith("{") or not head:
        raise AddressSpecError(f"white address {spec!r}: braces belong in the last group")
    items = [x.strip() for x in tail[1:-1].split(",")]
    if not all(items):
        raise AddressSpecError(f"white address {spec!r}: empty item in braces")
    allowed = frozenset(_address(f"{head}{sep}{x}", spec) for x in items)
    return allowed.__contains__


def _range(spec: str) -> Matcher:
    v6 = ":" in spec
    sep, base, top = (":", 16, 0xFFFF) if v6 else (".", 10, 255)
    groups = spec.split(sep)
    if v6:
        if "::" in spec:
            raise AddressSpecError(f"white address {spec!r}: write an IPv6 range in full")
        if len(groups) != 8:
            raise AddressSpecError(f"white address {spec!r}: an IPv6 range needs 8 groups")
    elif len(groups) != 4:
        raise AddressSpecError(f"white address {spec!r}: an IPv4 range needs 4 groups")
    at = next((i for i, g in enumerate(groups) if g == "*" or "-" in g), -1)
    if at < 1 or any(g != "*" for g in groups[at + 1 :]):
        raise AddressSpecError(
            f"white address {spec!r}: one group may be * or a-b, after the first, and "
            "every group after it must be *"
        )
    g = groups[at]
    try:
        lo, hi = (0, top) if g == "*" else (int(x, base) for x in g.split("-", 1))
    except ValueError:
        raise AddressSpecError(f"white address {spec!r}: bad range {g!r}") from None
    if not 0 <= lo <= hi <= top:
        raise AddressSpecError(f"white address {spec!r}: range {g!r} out of 0..{top}")
    try:
        prefix = [int(x, base) for x in groups[:at]]
    except ValueError:
        raise AddressSpecError(f"white address {spec!r}: bad group before the range") from None
    if any(not 0 <= p <= top for p in prefix):
        raise AddressSpecError(f"white address {spec!r}: group out of 0..{top}")

    def match(ip: str) -> bool:
        try:
            parts = [int(x, 16) for x in ip.split(":")] if v6 else [int(x) for x in ip.split(".")]
        except ValueError:
            return False
        if len(parts) != len(groups) or parts[:at] != prefix:
            return False
        return lo <= parts[at] <= hi

    return match


def remote_address_matcher(spec: str | None) -> Matcher:
    """A predicate over normalized peer addresses (normalize_ip) for one
    white-list entry. AddressSpecError when the entry is malformed."""
    if spec is None or not spec.strip():
        return _never
    spec = spec.strip()
    if spec in _ALL:
        return _always
    if spec.endswith("}"):
        return _braces(spec)
    if "," in spec:
        return frozenset(_address(x, spec) for x in spec.split(",")).__contains__
    if "*" in spec or ("-" in spec):
        return _range(spec)
    one = _address(spec, spec)
    return one.__eq__

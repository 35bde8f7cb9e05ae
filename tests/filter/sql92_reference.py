"""A reference for RocketMQ's SQL92 filter semantics, in plain Python, for
the property tests of pyrmq.common.filter: expressions are trees of tuples
that render to SQL text and evaluate here by walking the tree, written from
RocketMQ's filter module (ComparisonExpression, LogicExpression,
UnaryExpression) rule by rule, sharing no code with the compiled evaluator.

Values: ("I", int) Java Integer, ("L", int) Long, ("D", float) Double,
("S", str), ("B", bool); None is SQL NULL. An evaluation error (a string
that does not read as the number wanted) raises Unreadable: RocketMQ then
selects nothing for the message."""

from __future__ import annotations

import math
import re
from typing import Any

Value = tuple[str, Any] | None


class Unreadable(Exception):
    pass


def render(e: tuple[Any, ...]) -> str:
    op = e[0]
    if op == "prop":
        return e[1]
    if op == "lit":
        kind, v = e[1]
        if kind == "S":
            return "'" + v.replace("'", "''") + "'"
        if kind == "B":
            return "TRUE" if v else "FALSE"
        if kind == "L":
            return f"{v}L"
        if kind == "D":
            return repr(v)
        return str(v)
    if op in ("and", "or"):
        return "(" + f" {op.upper()} ".join(render(x) for x in e[1]) + ")"
    if op == "not":
        return f"(NOT {render(e[1])})"
    if op == "cmp":
        return f"({render(e[2])} {e[1]} {render(e[3])})"
    if op == "between":
        word = "NOT BETWEEN" if e[1] else "BETWEEN"
        return f"({render(e[2])} {word} {render(e[3])} AND {render(e[4])})"
    if op == "in":
        word = "NOT IN" if e[1] else "IN"
        items = ", ".join("'" + s.replace("'", "''") + "'" for s in e[3])
        return f"({e[2]} {word} ({items}))"
    if op == "null":
        return f"({e[2]} IS {'NOT ' if e[1] else ''}NULL)"
    if op == "str":
        return f"({e[3]} {'NOT ' if e[2] else ''}{e[1]} '{e[4]}')"
    raise AssertionError(op)


def _parse_int(s: str, bits: int) -> int:
    if not re.fullmatch(r"[+-]?[0-9]+", s):
        raise Unreadable(s)
    v = int(s)
    if not -(2 ** (bits - 1)) <= v < 2 ** (bits - 1):
        raise Unreadable(s)
    return v


_DOUBLE = r"[+-]?(NaN|Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[fFdD]?)"


def _parse_double(s: str) -> float:
    t = s.strip("".join(map(chr, range(33))))
    if not re.fullmatch(_DOUBLE, t):
        raise Unreadable(s)
    if "NaN" in t:
        return math.nan
    if "Infinity" in t:
        return -math.inf if t[0] == "-" else math.inf
    return float(t.rstrip("fFdD"))


def _double_cmp(a: float, b: float) -> int:
    """Double.compare."""
    if math.isnan(a) or math.isnan(b):
        return int(math.isnan(a)) - int(math.isnan(b))
    if a == b == 0:
        return int(math.copysign(1, a) > math.copysign(1, b)) - int(
            math.copysign(1, a) < math.copysign(1, b)
        )
    return (a > b) - (a < b)


def _compare(lv: tuple[str, Any], rv: tuple[str, Any]) -> int:
    """__compare with convertStringExpressions."""
    (lk, a), (rk, b) = lv, rv
    nums = {"I", "L", "D"}
    if lk == rk:
        if lk == "D":
            return _double_cmp(a, b)
        return (a > b) - (a < b)
    if lk in nums and rk in nums:
        if "D" in (lk, rk):
            return _double_cmp(float(a), float(b))
        return (a > b) - (a < b)
    if lk == "S" and rk in nums | {"B"}:
        if rk == "B":
            lb = a.lower() == "true"
            return (lb > b) - (lb < b)
        conv = _parse_double(a) if rk == "D" else _parse_int(a, 32 if rk == "I" else 64)
        return _double_cmp(conv, b) if rk == "D" else (conv > b) - (conv < b)
    if rk == "S" and lk in nums:
        conv = _parse_double(b) if lk == "D" else _parse_int(b, 32 if lk == "I" else 64)
        return _double_cmp(a, conv) if lk == "D" else (a > conv) - (a < conv)
    if lk == "B" and rk == "S":
        raise Unreadable("Boolean cast to String")
    return -1


def _value(e: tuple[Any, ...], props: dict[str, str]) -> Value:
    if e[0] == "prop":
        v = props.get(e[1])
        return None if v is None else ("S", v)
    if e[0] == "lit":
        return e[1]
    b = evaluate(e, props)
    return None if b is None else ("B", b)


def evaluate(e: tuple[Any, ...], props: dict[str, str]) -> bool | None:
    op = e[0]
    if op in ("and", "or"):
        # a left fold of Java's binary AND / OR, each stopping at a FALSE
        # (AND) or a TRUE (OR) left side without evaluating the right one
        stop = op == "or"
        acc = evaluate(e[1][0], props)
        for x in e[1][1:]:
            if acc is stop:
                return stop
            v = evaluate(x, props)
            if v is stop:
                acc = stop
            elif acc is None or v is None:
                acc = None
            else:
                acc = not stop
        return acc
    if op == "not":
        v = evaluate(e[1], props)
        return None if v is None else not v
    if op == "prop":  # a property as a boolean: a string is never TRUE
        return None if props.get(e[1]) is None else False
    if op == "lit":
        return e[1][1]
    if op == "cmp":
        sym, lv, rv = e[1], _value(e[2], props), _value(e[3], props)
        if sym in ("=", "<>"):
            if lv is None or rv is None:
                eq: bool | None = (lv is None and rv is None) or (None if lv is None else False)
            elif lv == rv:
                eq = True
            else:
                eq = _compare(lv, rv) == 0
            if sym == "=":
                return eq
            return None if eq is None else not eq
        if lv is None or rv is None:
            return None
        if lv[0] == rv[0] == "S":
            c = _double_cmp(_parse_double(lv[1]), _parse_double(rv[1]))
        else:
            c = _compare(lv, rv)
        return {">": c > 0, ">=": c >= 0, "<": c < 0, "<=": c <= 0}[sym]
    if op == "between":
        negated, x, lo, hi = e[1:]
        if negated:
            return evaluate(("or", [("cmp", "<", x, lo), ("cmp", ">", x, hi)]), props)
        return evaluate(("and", [("cmp", ">=", x, lo), ("cmp", "<=", x, hi)]), props)
    if op == "in":
        negated, name, items = e[1:]
        v = props.get(name)
        if v is None:
            return None
        return (v in items) != negated
    if op == "null":
        negated, name = e[1:]
        return (props.get(name) is None) != negated
    if op == "str":
        word, negated, name, search = e[1:]
        v = props.get(name)
        if not search or v is None:
            return False
        hit = {"CONTAINS": search in v, "STARTSWITH": v.startswith(search),
               "ENDSWITH": v.endswith(search)}[word]  # fmt: skip
        return hit != negated
    raise AssertionError(op)


def selects(e: tuple[Any, ...], props: dict[str, str]) -> bool:
    try:
        return evaluate(e, props) is True
    except Unreadable:
        return False

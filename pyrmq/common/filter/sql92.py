"""SQL92 message filters (RocketMQ's ``MessageSelector.bySql``): parsed once,
compiled once into closures, evaluated against a message's properties.

The grammar and the semantics are RocketMQ's (its filter module, a JMS
selector): on user properties and TAGS, whose values are always strings,

- ``=`` ``<>`` ``>`` ``>=`` ``<`` ``<=``; ``[NOT] BETWEEN x AND y``;
  ``[NOT] IN ('a', 'b')`` (strings, on a property); ``IS [NOT] NULL``;
  ``[NOT] CONTAINS`` / ``STARTSWITH`` / ``ENDSWITH`` 'text' (RocketMQ 5);
  ``AND``, ``OR``, ``NOT``, parentheses, unary ``-`` and ``+``; literals
  'string' ('' for a quote), integers (``L`` suffix allowed), decimals
  (``5.``, ``.5``, ``5E10``), ``TRUE``, ``FALSE``, ``NULL``; keywords in
  any case; ``--`` and ``/* */`` comments; property names
  ``[A-Za-z_$][A-Za-z0-9_$]*``.
- Three-valued logic: a comparison with a missing property is NULL, not an
  error; ``NOT NULL`` is NULL; ``AND``/``OR`` as SQL; a message is
  selected only when the whole expression is TRUE. ``IN`` and ``=`` on a
  missing property are NULL; CONTAINS and friends are FALSE.
- Types as Java's: a property compared with a number is read as that
  number's type (``Integer.valueOf``, ``Long.valueOf``, ``Double.valueOf``),
  with ``TRUE``/``FALSE`` as ``Boolean.valueOf``; two properties compared
  with ``>``... are both read as doubles. A value that does not read as
  the number wanted is an evaluation error, which RocketMQ's broker logs
  and treats as "not selected": the whole expression then selects nothing
  for that message, whatever an OR around it says.
- Parse-time checks RocketMQ makes: ``>``... only on numbers, properties
  and arithmetic; no NULL in ``=``; ``IN`` only on a property; BETWEEN's
  constant bounds in order; the whole expression boolean.

One difference, a superset: RocketMQ refuses a decimal literal below
Double.MIN_VALUE (so ``0.0``); pyrmq takes it. Expressions are limited to
MAX_EXPRESSION_CHARS characters and MAX_DEPTH levels of nesting (a hostile
subscription cannot exhaust the broker's stack or memory).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from lark import Lark, Token, Tree
from lark.exceptions import LarkError, UnexpectedInput

MAX_EXPRESSION_CHARS = 65_536
MAX_DEPTH = 64

_GRAMMAR = r"""
start: or_expr
?or_expr: and_expr | or_expr _OR and_expr -> or_
?and_expr: eq_expr | and_expr _AND eq_expr -> and_
?eq_expr: cmp_expr
    | eq_expr "=" cmp_expr -> eq
    | eq_expr "<>" cmp_expr -> ne
    | eq_expr _IS _NULL -> is_null
    | eq_expr _IS _NOT _NULL -> is_not_null
?cmp_expr: unary
    | cmp_expr ">" unary -> gt
    | cmp_expr ">=" unary -> ge
    | cmp_expr "<" unary -> lt
    | cmp_expr "<=" unary -> le
    | cmp_expr _CONTAINS string -> contains
    | cmp_expr _NOT _CONTAINS string -> not_contains
    | cmp_expr _STARTSWITH string -> startswith
    | cmp_expr _NOT _STARTSWITH string -> not_startswith
    | cmp_expr _ENDSWITH string -> endswith
    | cmp_expr _NOT _ENDSWITH string -> not_endswith
    | cmp_expr _BETWEEN unary _AND unary -> between
    | cmp_expr _NOT _BETWEEN unary _AND unary -> not_between
    | cmp_expr _IN "(" string ("," string)* ")" -> in_
    | cmp_expr _NOT _IN "(" string ("," string)* ")" -> not_in
?unary: primary
    | "+" unary
    | "-" unary -> neg
    | _NOT unary -> not_
?primary: string
    | DECIMAL -> decimal
    | FLOAT -> float_
    | _TRUE -> true
    | _FALSE -> false
    | _NULL -> null
    | ID -> prop
    | "(" or_expr ")"
string: STRING

_OR: "OR"i
_AND: "AND"i
_NOT: "NOT"i
_IS: "IS"i
_NULL: "NULL"i
_TRUE: "TRUE"i
_FALSE: "FALSE"i
_BETWEEN: "BETWEEN"i
_IN: "IN"i
_CONTAINS: "CONTAINS"i
_STARTSWITH: "STARTSWITH"i
_ENDSWITH: "ENDSWITH"i
FLOAT.2: /[0-9]+\.[0-9]*([eE][+-]?[0-9]+)?|\.[0-9]+([eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+/
DECIMAL: /(0|[1-9][0-9]*)[lL]?/
STRING: /'([^']|'')*'/
ID: /[A-Za-z_$][A-Za-z0-9_$]*/
%ignore /[ \t\n\r\f]+/
%ignore /--[^\n\r]*/
%ignore /\/\*(.|\n)*?\*\//
"""


@functools.cache
def _parser() -> Lark:
    return Lark(_GRAMMAR, parser="lalr", maybe_placeholders=False)


class Sql92Error(ValueError):
    """An expression that does not parse, or that RocketMQ would refuse."""


class _EvalError(Exception):
    """A value that does not read as the type a comparison wants (Java's
    NumberFormatException): the message is not selected."""


# -- Java values ---------------------------------------------------------------------------


class JLong(int):
    """A Java Long (an int literal outside Integer's range, or with an L
    suffix); a plain int is a Java Integer, float a Double."""

    __slots__ = ()


_INT_RE = re.compile(r"[+-]?[0-9]+")
_DOUBLE_RE = re.compile(r"[+-]?(NaN|Infinity|([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?[fFdD]?)")
_I32 = (-(2**31), 2**31 - 1)
_I64 = (-(2**63), 2**63 - 1)


def _java_int(s: str, bounds: tuple[int, int]) -> int:
    """Integer.valueOf / Long.valueOf: digits with an optional sign, in range."""
    if _INT_RE.fullmatch(s) is None:
        raise _EvalError(f"{s!r} is not an integer")
    v = int(s)
    if not bounds[0] <= v <= bounds[1]:
        raise _EvalError(f"{s!r} is out of range")
    return v


def _java_double(s: str) -> float:
    """Double.valueOf: surrounding whitespace (chars <= ' ') ignored."""
    t = s.strip("".join(chr(c) for c in range(33)))
    m = _DOUBLE_RE.fullmatch(t)
    if m is None:
        raise _EvalError(f"{s!r} is not a number")
    if m.group(1) == "NaN":
        return math.nan
    if m.group(1) == "Infinity":
        return -math.inf if t.startswith("-") else math.inf
    return float(t.rstrip("fFdD"))


def _kind(v: object) -> str:
    if isinstance(v, str):
        return "S"
    if isinstance(v, bool):
        return "B"
    if isinstance(v, JLong):
        return "L"
    if isinstance(v, int):
        return "I"
    return "D"


def _num_cmp(a: float, b: float) -> int:
    """compareTo of two numbers (Double.compare when either is a float:
    NaN above everything and equal to itself, -0.0 below 0.0)."""
    if isinstance(a, float) or isinstance(b, float):
        fa, fb = float(a), float(b)
        if math.isnan(fa) or math.isnan(fb):
            return (math.isnan(fa) > math.isnan(fb)) - (math.isnan(fa) < math.isnan(fb))
        if fa == fb == 0.0:
            sa, sb = math.copysign(1, fa), math.copysign(1, fb)
            return (sa > sb) - (sa < sb)
        return (fa > fb) - (fa < fb)
    return (a > b) - (a < b)


def java_compare(lv: Any, rv: Any) -> int:
    """ComparisonExpression.__compare with string conversion on (always, in
    RocketMQ's parser): a string beside a number is read as that number's
    type; unrelated types compare as -1."""
    lk, rk = _kind(lv), _kind(rv)
    if lk != rk:
        if lk == "B":
            if rk == "S":  # RocketMQ casts the Boolean to String: it fails
                raise _EvalError("a boolean cannot be compared with a string")
            return -1
        if lk in "ILD" and rk in "ILD":
            return _num_cmp(lv, rv)
        if lk == "S":
            if rk == "B":
                lv = lv.lower() == "true"
            elif rk == "I":
                lv = _java_int(lv, _I32)
            elif rk == "L":
                lv = _java_int(lv, _I64)
            elif rk == "D":
                lv = _java_double(lv)
        elif rk == "S":
            if lk == "I":
                rv = _java_int(rv, _I32)
            elif lk == "L":
                rv = _java_int(rv, _I64)
            else:
                rv = _java_double(rv)
        else:
            return -1
        if isinstance(lv, bool) or isinstance(rv, bool):
            return (lv > rv) - (lv < rv)
        return _num_cmp(lv, rv)
    if lk in "ILD":
        return _num_cmp(lv, rv)
    return (lv > rv) - (lv < rv)


# -- the compiled form -----------------------------------------------------------------------

Props = Mapping[str, str]
Fn = Callable[[Props], Any]


class Node:
    """A parsed expression: its closure, and what the parse-time checks
    need to know of it."""

    __slots__ = ("boolean", "const", "fn", "is_const", "prop", "text")

    def __init__(
        self,
        fn: Fn,
        text: str,
        *,
        boolean: bool = False,
        const: Any = None,
        is_const: bool = False,
        prop: str | None = None,
    ) -> None:
        self.fn = fn
        self.text = text
        self.boolean = boolean
        self.const = const
        self.is_const = is_const
        self.prop = prop


def _constant(v: Any, text: str, boolean: bool = False) -> Node:
    return Node(lambda p: v, text, boolean=boolean, const=v, is_const=True)


def _as_boolean(n: Node) -> Node:
    """asBooleanExpression: a property is cast (a string is never TRUE)."""
    if n.boolean:
        return n
    if n.prop is not None:
        name = n.prop
        return Node(lambda p: None if p.get(name) is None else False, n.text, boolean=True)
    raise Sql92Error(f"Expression will not result in a boolean value: {n.text}")


def _check_less_than_operand(n: Node) -> None:
    if n.is_const:
        if isinstance(n.const, (int, float)) and not isinstance(n.const, bool):
            return
        raise Sql92Error(f"Value '{n.text}' cannot be compared.")
    if n.boolean:
        raise Sql92Error(f"Value '{n.text}' cannot be compared.")


def _check_equal_operand(n: Node) -> None:
    if n.is_const and n.const is None:
        raise Sql92Error(f"'{n.text}' cannot be compared.")


def _equal_fn(lf: Fn, rf: Fn) -> Fn:
    def eq(p: Props) -> bool | None:
        lv, rv = lf(p), rf(p)
        if lv is None or rv is None:
            if lv is None and rv is None:
                return True
            return None if lv is None else False
        if _kind(lv) == _kind(rv) and lv == rv:
            return True
        return java_compare(lv, rv) == 0

    return eq


def _not_fn(f: Fn) -> Fn:
    def not_(p: Props) -> bool | None:
        v = f(p)
        return None if v is None else not v

    return not_


_ORDER: dict[str, Callable[[int], bool]] = {
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
}


def _order(op: str, left: Node, right: Node) -> Node:
    _check_less_than_operand(left)
    _check_less_than_operand(right)
    lf, rf, test = left.fn, right.fn, _ORDER[op]

    def cmp(p: Props) -> bool | None:
        lv = lf(p)
        if lv is None:
            return None
        rv = rf(p)
        if rv is None:
            return None
        if isinstance(lv, str) and isinstance(rv, str):
            return test(_num_cmp(_java_double(lv), _java_double(rv)))
        return test(java_compare(lv, rv))

    return Node(cmp, f"{left.text} {op} {right.text}", boolean=True)


def _and(nodes: list[Node]) -> Fn:
    fns = [n.fn for n in nodes]

    def and_(p: Props) -> bool | None:
        unknown = False
        for f in fns:
            v = f(p)
            if v is False:
                return False
            if v is None:
                unknown = True
        return None if unknown else True

    return and_


def _or(nodes: list[Node]) -> Fn:
    fns = [n.fn for n in nodes]

    def or_(p: Props) -> bool | None:
        unknown = False
        for f in fns:
            v = f(p)
            if v is True:
                return True
            if v is None:
                unknown = True
        return None if unknown else False

    return or_


def _string_test(left: Node, search: str, test: Callable[[str, str], bool], negate: bool) -> Fn:
    lf = left.fn

    def fn(p: Props) -> bool:
        if not search:
            return False
        v = lf(p)
        if not isinstance(v, str):
            return False
        return test(v, search) is not negate

    return fn


def _negate(v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if isinstance(v, JLong):
        return JLong(-v)
    return -v


class _Compiler:
    """Parse tree -> Node, with RocketMQ's parse-time checks."""

    def __init__(self, source: str) -> None:
        self.source = source

    def node(self, t: Tree[Token] | Token, depth: int = 0) -> Node:
        if depth > MAX_DEPTH:
            raise Sql92Error(f"the expression is nested more than {MAX_DEPTH} levels deep")
        if isinstance(t, Token):  # pragma: no cover - every token sits in a rule
            raise Sql92Error(f"unexpected {t!r}")
        kind = str(t.data)
        kids = t.children
        d = depth + 1
        if kind == "start":
            return _as_boolean(self.node(kids[0], d))
        if kind in ("and_", "or_"):
            # flatten a chain of one operator into one n-ary node
            operands: list[Tree[Token] | Token] = []
            todo = list(kids)
            while todo:
                k = todo.pop(0)
                if isinstance(k, Tree) and str(k.data) == kind:
                    todo[:0] = k.children
                else:
                    operands.append(k)
            nodes = [_as_boolean(self.node(k, d)) for k in operands]
            word = " AND " if kind == "and_" else " OR "
            fn = _and(nodes) if kind == "and_" else _or(nodes)
            return Node(fn, "(" + word.join(n.text for n in nodes) + ")", boolean=True)
        if kind in ("eq", "ne"):
            left, right = self.node(kids[0], d), self.node(kids[1], d)
            _check_equal_operand(left)
            _check_equal_operand(right)
            if left.is_const and right.is_const and left.boolean and not right.boolean:
                raise Sql92Error(f"'{left.text}' cannot be compared with '{right.text}'")
            fn = _equal_fn(left.fn, right.fn)
            op = "="
            if kind == "ne":
                fn, op = _not_fn(fn), "<>"
            return Node(fn, f"{left.text} {op} {right.text}", boolean=True)
        if kind in ("is_null", "is_not_null"):
            left = self.node(kids[0], d)
            lf = left.fn
            if kind == "is_null":
                return Node(lambda p: lf(p) is None, f"{left.text} IS NULL", boolean=True)
            return Node(lambda p: lf(p) is not None, f"{left.text} IS NOT NULL", boolean=True)
        if kind in ("gt", "ge", "lt", "le"):
            op = {"gt": ">", "ge": ">=", "lt": "<", "le": "<="}[kind]
            return _order(op, self.node(kids[0], d), self.node(kids[1], d))
        if kind in ("between", "not_between"):
            value, low, high = (self.node(k, d) for k in kids)
            if kind == "between":
                if low.is_const and high.is_const:
                    if low.const is None or high.const is None:
                        raise Sql92Error("Illegal values of between, values can not be null!")
                    try:
                        reversed_ = java_compare(high.const, low.const) < 0
                    except _EvalError as e:
                        raise Sql92Error(f"Illegal values of between: {e}") from None
                    if reversed_:
                        raise Sql92Error(
                            f"Illegal values of between, left value({low.text}) must less "
                            f"than or equal to right value({high.text})"
                        )
                parts = [_order(">=", value, low), _order("<=", value, high)]
                fn = _and(parts)
                text = f"{value.text} BETWEEN {low.text} AND {high.text}"
            else:
                parts = [_order("<", value, low), _order(">", value, high)]
                fn = _or(parts)
                text = f"{value.text} NOT BETWEEN {low.text} AND {high.text}"
            return Node(fn, text, boolean=True)
        if kind in ("in_", "not_in"):
            left = self.node(kids[0], d)
            if left.prop is None:
                raise Sql92Error(f"Expected a property for In expression, got: {left.text}")
            values = frozenset(self.string(k) for k in kids[1:])
            name, negate = left.prop, kind == "not_in"

            def in_(p: Props) -> bool | None:
                v = p.get(name)
                if v is None:
                    return None
                return (v in values) is not negate

            word = "NOT IN" if negate else "IN"
            return Node(in_, f"{name} {word} ({len(values)} values)", boolean=True)
        if kind in ("contains", "not_contains", "startswith", "not_startswith", "endswith",
                    "not_endswith"):  # fmt: skip
            left = self.node(kids[0], d)
            search = self.string(kids[1])
            base = kind.removeprefix("not_")
            test: Callable[[str, str], bool] = {
                "contains": lambda v, s: s in v,
                "startswith": str.startswith,
                "endswith": str.endswith,
            }[base]
            fn = _string_test(left, search, test, kind.startswith("not_"))
            return Node(fn, f"{left.text} {kind.upper()} '{search}'", boolean=True)
        if kind == "not_":
            inner = _as_boolean(self.node(kids[0], d))
            return Node(_not_fn(inner.fn), f"NOT {inner.text}", boolean=True)
        if kind == "neg":
            inner = self.node(kids[0], d)
            if inner.is_const:
                v = _negate(inner.const)
                return _constant(v, f"-{inner.text}") if v is not None else inner
            f = inner.fn
            return Node(lambda p: _negate(f(p)), f"-{inner.text}")
        if kind == "unary":  # "+" x
            return self.node(kids[0], d)
        if kind == "string":
            s = self.string(t)
            return _constant(s, "'" + s.replace("'", "''") + "'")
        if kind == "decimal":
            text = str(kids[0])
            digits = text.rstrip("lL")
            v = int(digits)
            if v > _I64[1]:
                raise Sql92Error(f"the integer {text} is larger than a long")
            long_ = digits != text or v > _I32[1]
            return _constant(JLong(v) if long_ else v, text)
        if kind == "float_":
            text = str(kids[0])
            number = float(text)
            if math.isinf(number):
                raise Sql92Error(f"{text} is greater than {1.7976931348623157e308}")
            return _constant(number, text)
        if kind in ("true", "false"):
            return _constant(kind == "true", kind.upper(), boolean=True)
        if kind == "null":
            return _constant(None, "NULL", boolean=True)
        if kind == "prop":
            name = str(kids[0])
            return Node(lambda p: p.get(name), name, prop=name)
        raise Sql92Error(f"unsupported construct {kind}")  # pragma: no cover

    def string(self, t: Tree[Token] | Token) -> str:
        tok = t.children[0] if isinstance(t, Tree) else t
        return str(tok)[1:-1].replace("''", "'")


class Sql92Filter:
    """A compiled SQL92 expression: ``matches(properties)``."""

    __slots__ = ("_fn", "expression")

    def __init__(self, expression: str, fn: Fn) -> None:
        self.expression = expression
        self._fn = fn

    def evaluate(self, properties: Props) -> bool | None:
        """TRUE, FALSE or NULL (None); raises ValueError for a value that
        does not read as the number a comparison wants."""
        try:
            v = self._fn(properties)
        except _EvalError as e:
            raise ValueError(str(e)) from None
        return v if v is None else bool(v)

    def matches(self, properties: Props) -> bool:
        """Whether a message with these properties is selected (an
        evaluation error selects nothing, as RocketMQ's broker does)."""
        try:
            return self._fn(properties) is True
        except _EvalError:
            return False

    def __repr__(self) -> str:
        return f"Sql92Filter({self.expression!r})"


def _nesting(expression: str) -> int:
    depth = deepest = 0
    for ch in expression:
        if ch == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == ")":
            depth -= 1
    return deepest


@functools.lru_cache(maxsize=1024)
def compile_sql92(expression: str) -> Sql92Filter:
    """Parse and compile an expression once (cached by its text); raises
    Sql92Error naming the problem."""
    if not isinstance(expression, str):
        raise Sql92Error(f"a SQL92 expression is text, not {type(expression).__name__}")
    if not expression.strip():
        raise Sql92Error("the SQL92 expression is empty")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise Sql92Error(
            f"the SQL92 expression is {len(expression)} characters; at most {MAX_EXPRESSION_CHARS}"
        )
    if _nesting(expression) > MAX_DEPTH:
        raise Sql92Error(f"the expression is nested more than {MAX_DEPTH} levels deep")
    try:
        tree = _parser().parse(expression)
    except UnexpectedInput as e:
        pos = getattr(e, "pos_in_stream", None)
        if pos is None or pos < 0 or pos >= len(expression):
            where = "at its end"
        else:
            where = f"at character {pos + 1} ({expression[pos : pos + 20]!r})"
        raise Sql92Error(f"SQL92 syntax error {where} in {expression[:200]!r}") from None
    except LarkError as e:
        raise Sql92Error(f"SQL92 syntax error: {e}") from None
    try:
        root = _Compiler(expression).node(tree)
    except RecursionError:
        raise Sql92Error("the expression is too deeply nested") from None
    return Sql92Filter(expression, root.fn)

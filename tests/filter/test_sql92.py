"""SQL92 filters (pyrmq.common.filter): RocketMQ's grammar and semantics,
the compiled evaluator checked against a plain-Python reference
(tests/filter/sql92_reference.py) on random expressions and messages, the
errors a user sees, and hostile input (huge, deeply nested, garbage)."""

from __future__ import annotations

import string
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyrmq.common.errors import SubscriptionParseFailedError
from pyrmq.common.filter import Sql92Error, compile_sql92
from pyrmq.common.filter.sql92 import MAX_DEPTH, MAX_EXPRESSION_CHARS
from pyrmq.common.subscription import MessageSelector, subscription_of
from tests.filter import sql92_reference as ref

NAMES = ["a", "b", "region", "TAGS"]
#: property values: numbers in several spellings, words, booleans, blanks
VALUES = ["1", "-3", "2.5", "0", "-0.0", "1e3", " 7 ", "5L", "abc", "eu", "us", "true",
          "TRUE", "false", "", "3000000000", "NaN", "Infinity", "0x10", "1_000", "٣"]  # fmt: skip

ints = st.integers(-5, 5).map(lambda v: ("I", v)) | st.sampled_from([("L", 3000000000), ("L", 2)])
doubles = st.sampled_from([0.5, 2.5, 1000.0, 3.0]).map(lambda v: ("D", v))
strings = st.sampled_from(["eu", "abc", "1", "2.5", "it's", ""]).map(lambda v: ("S", v))
bools = st.booleans().map(lambda v: ("B", v))
props = st.sampled_from(NAMES).map(lambda n: ("prop", n))
numeric = props | (ints | doubles).map(lambda v: ("lit", v))
operand = numeric | (strings | bools).map(lambda v: ("lit", v))


def _leaf() -> st.SearchStrategy[tuple[Any, ...]]:
    eq = st.tuples(st.just("cmp"), st.sampled_from(["=", "<>"]), props, operand)
    eq_rev = st.tuples(st.just("cmp"), st.sampled_from(["=", "<>"]), operand, props)
    order = st.tuples(st.just("cmp"), st.sampled_from([">", ">=", "<", "<="]), numeric, numeric)
    between = st.tuples(st.just("between"), st.booleans(), props, numeric, numeric).filter(
        _between_ok
    )
    in_ = st.tuples(
        st.just("in"), st.booleans(), st.sampled_from(NAMES),
        st.lists(st.sampled_from(["eu", "us", "1", "abc"]), min_size=1, max_size=3),
    )  # fmt: skip
    null = st.tuples(st.just("null"), st.booleans(), st.sampled_from(NAMES))
    text = st.tuples(
        st.just("str"), st.sampled_from(["CONTAINS", "STARTSWITH", "ENDSWITH"]), st.booleans(),
        st.sampled_from(NAMES), st.sampled_from(["e", "ab", "1", ""]),
    )  # fmt: skip
    lit = bools.map(lambda v: ("lit", v))
    return eq | eq_rev | order | between | in_ | null | text | lit | props


def _between_ok(e: tuple[Any, ...]) -> bool:
    """RocketMQ refuses constant bounds out of order at parse time."""
    lo, hi = e[3], e[4]
    if lo[0] == "lit" and hi[0] == "lit":
        return float(lo[1][1]) <= float(hi[1][1])
    return True


expressions = st.recursive(
    _leaf(),
    lambda inner: (
        st.tuples(st.just("and"), st.lists(inner, min_size=2, max_size=3))
        | st.tuples(st.just("or"), st.lists(inner, min_size=2, max_size=3))
        | st.tuples(st.just("not"), inner)
    ),
    max_leaves=8,
)
messages = st.dictionaries(st.sampled_from(NAMES), st.sampled_from(VALUES), max_size=4)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions, st.lists(messages, min_size=1, max_size=8))
def test_compiled_evaluator_agrees_with_the_reference(e, msgs):
    text = ref.render(e)
    f = compile_sql92(text)
    for m in msgs:
        assert f.matches(m) == ref.selects(e, m), (text, m)


@pytest.mark.parametrize(
    ("expression", "props", "selected"),
    [
        ("a > 5", {"a": "10"}, True),
        ("a > 5", {}, False),  # a missing property: NULL, not an error
        ("NOT (a > 5)", {}, False),  # NOT NULL is NULL
        ("a > 5 OR b = 'x'", {"a": "ten", "b": "x"}, False),  # unreadable: nothing
        ("b = 'x' OR a > 5", {"a": "ten", "b": "x"}, True),  # OR stops at TRUE first
        ("a = 5", {"a": "3000000000"}, False),  # not an Integer
        ("a = 3000000000", {"a": "3000000000"}, True),  # a Long
        ("a > 1.5", {"a": " 2 "}, True),  # Double.valueOf trims
        ("a > 1", {"a": " 2 "}, False),  # Integer.valueOf does not
        ("a = TRUE", {"a": "True"}, True),
        ("a BETWEEN 1 AND 3", {"a": "3"}, True),
        ("a NOT BETWEEN 1 AND 3", {"a": "4"}, True),
        ("region IN ('eu', 'us')", {"region": "eu"}, True),
        ("region NOT IN ('eu')", {}, False),
        ("region IS NULL AND a IS NOT NULL", {"a": "1"}, True),
        ("TAGS = 'TagA' AND a >= -1", {"TAGS": "TagA", "a": "-1"}, True),
        ("a CONTAINS 'bc' AND a STARTSWITH 'a' AND a ENDSWITH 'd'", {"a": "abcd"}, True),
        ("a NOT CONTAINS 'x'", {}, False),
        ("a > b", {"a": "2", "b": "1.5"}, True),
        ("a = 'it''s'", {"a": "it's"}, True),
        ("-- a comment\n a = 'x' /* another */", {"a": "x"}, True),
        ("a = 'x' and b = 'y' or region = 'z'", {"region": "z"}, True),
        ("TRUE", {}, True),
        ("FALSE OR NULL", {}, False),
        ("a", {"a": "true"}, False),  # a string is never a boolean TRUE
    ],
)
def test_rocketmq_semantics(expression, props, selected):
    assert compile_sql92(expression).matches(props) is selected


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ("", "empty"),
        ("a >", "syntax error"),
        ("a > 'x'", "cannot be compared"),
        ("a = NULL", "cannot be compared"),
        ("a > TRUE", "cannot be compared"),
        ("TRUE = 5", "cannot be compared with"),
        ("5", "will not result in a boolean"),
        ("'x' AND TRUE", "will not result in a boolean"),
        ("a IN (1)", "syntax error"),
        ("5 IN ('a')", "Expected a property"),
        ("a BETWEEN 5 AND 1", "must less than or equal"),
        ("a BETWEEN NULL AND 1", "can not be null"),
        ("a.b = 1", "syntax error"),
        ("a = 99999999999999999999", "larger than a long"),
        ("a = 1e999", "greater than"),
        ("a = 'unterminated", "syntax error"),
        ("SELECT * FROM t", "syntax error"),
    ],
)
def test_a_bad_expression_says_what_is_wrong(expression, says):
    with pytest.raises(Sql92Error, match=says) as exc:
        compile_sql92(expression)
    assert "\n" not in str(exc.value)


def test_hostile_expressions_are_refused_quickly():
    deep = "(" * (MAX_DEPTH + 1) + "a = 1" + ")" * (MAX_DEPTH + 1)
    with pytest.raises(Sql92Error, match="nested"):
        compile_sql92(deep)
    with pytest.raises(Sql92Error, match="characters"):
        compile_sql92("a = 1 AND " * (MAX_EXPRESSION_CHARS // 10 + 1) + "a = 1")
    # NOT NOT NOT ... nests without parentheses
    with pytest.raises(Sql92Error, match="nested"):
        compile_sql92("NOT " * 500 + "a = 1")
    # long flat chains are fine: AND/OR chains are one level
    chain = " OR ".join(f"a = '{i}'" for i in range(2000))
    assert compile_sql92(chain).matches({"a": "1999"})
    big_in = "a IN (" + ", ".join(f"'{i}'" for i in range(5000)) + ")"
    assert compile_sql92(big_in).matches({"a": "4999"})


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=string.printable + "'()<>=", max_size=80))
def test_garbage_never_escapes_as_anything_but_sql92error(text):
    try:
        f = compile_sql92(text)
    except Sql92Error:
        return
    f.matches({"a": "1", "b": "x"})  # and what parses evaluates without raising


def test_consumers_refuse_a_bad_selector_before_sending():
    sub = subscription_of("T", MessageSelector.by_sql("a > 5 AND region = 'eu'"))
    assert sub.expression_type == "SQL92" and not sub.matches_all
    assert sub.accepts({"a": "6", "region": "eu"}) and not sub.accepts({"a": "6"})
    assert sub.as_json()["expressionType"] == "SQL92"
    with pytest.raises(SubscriptionParseFailedError, match="does not parse"):
        subscription_of("T", MessageSelector.by_sql("a >"))
    tag = subscription_of("T", MessageSelector.by_tag("TagA || TagB"))
    assert tag.expression_type == "TAG" and tag.accepts({"TAGS": "TagB"})

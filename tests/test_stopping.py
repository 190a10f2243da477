"""Tests for the stopping-condition language (magister.curricula.stopping)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from magister.curricula.sequential import METRIC_NAMES
from magister.curricula.stopping import Condition, ConditionSyntaxError, parse_condition

NAMES = {"steps", "episodes", "tasks", "return", "progress", "success"}


def test_metric_names_match_sequential():
    assert set(METRIC_NAMES) == NAMES


@pytest.mark.parametrize(
    "text, metrics, expected",
    [
        ("return>=1.0&&episodes>=1000", {"return": 1.0, "episodes": 1000}, True),
        ("return>=1.0&&episodes>=1000", {"return": 0.99, "episodes": 1000}, False),
        ("return>=1.0&&episodes>=1000", {"return": 2.0, "episodes": 999}, False),
        ("steps>=5e5||tasks>=200", {"steps": 499_999, "tasks": 199}, False),
        ("steps>=5e5||tasks>=200", {"steps": 500_000, "tasks": 0}, True),
        ("steps>=5e5||tasks>=200", {"steps": 0, "tasks": 200}, True),
        ("steps > 10", {"steps": 10}, False),
        ("steps > 10", {"steps": 11}, True),
        ("steps<10", {"steps": 10}, False),
        ("steps<=10", {"steps": 10}, True),
        ("steps==10", {"steps": 10}, True),
        ("steps==10", {"steps": 10.5}, False),
        ("return>=-1.5e-1", {"return": -0.15}, True),
        ("return>=-1.5e-1", {"return": -0.16}, False),
        ("progress>.5", {"progress": 0.5}, False),
        ("progress>=5.", {"progress": 5.0}, True),
        ("success>=2.5E+1", {"success": 25.0}, True),
        ("100<=episodes", {"episodes": 100}, True),
        ("  ( steps >= 1 )  ", {"steps": 1}, True),
        ("steps>=+3", {"steps": 3}, True),
    ],
)
def test_evaluate_by_hand(text, metrics, expected):
    assert parse_condition(text, names=NAMES).evaluate(metrics) is expected


def test_and_binds_tighter_than_or():
    m = {"steps": 2, "episodes": 0, "tasks": 0}
    # steps>1 || (episodes>1 && tasks>1) is True; (steps>1 || episodes>1) && tasks>1 would be False.
    assert parse_condition("steps>1||episodes>1&&tasks>1").evaluate(m) is True
    assert parse_condition("episodes>1&&tasks>1||steps>1").evaluate(m) is True
    assert parse_condition("(steps>1||episodes>1)&&tasks>1").evaluate(m) is False
    assert parse_condition("((steps>1))&&(tasks<1||episodes>5)").evaluate(m) is True


def test_nan_metric_makes_comparisons_false():
    cond = parse_condition("return>=0||return<0||return==0", names=NAMES)
    assert cond.evaluate({"return": math.nan}) is False
    assert cond.evaluate({"return": 0.0}) is True


def test_names_are_collected():
    cond = parse_condition("(return>=1&&episodes>3)||steps>=1e3", names=NAMES)
    assert cond.names == frozenset({"return", "episodes", "steps"})
    assert parse_condition("1<2").names == frozenset()


@pytest.mark.parametrize(
    "text, position, expected",
    [
        ("return>>1", 7, "a number or a metric name"),
        ("episodes>=", 10, "a number or a metric name"),
        ("foo>=1", 0, "a metric name, one of"),
        ("steps>=1&&bar<2", 10, "a metric name, one of"),
        ("", 0, "a comparison"),
        ("   ", 3, "a comparison"),
        ("steps=1", 5, "'=='"),
        ("steps>=1 & tasks>1", 9, "'&&'"),
        ("steps>=1 | tasks>1", 9, "'||'"),
        ("(steps>=1", 9, "')'"),
        ("steps>=1)", 8, "end of input"),
        ("steps>=1 tasks>=1", 9, "'&&', '||' or end of input"),
        ("steps", 5, "a comparison operator"),
        ("steps>=1&&", 10, "a number or a metric name"),
        ("steps>=1||||tasks>1", 10, "a number or a metric name"),
        ("steps>=-tasks", 8, "a number after the sign"),
        ("steps>=1e", 8, "'&&', '||' or end of input"),
        ("steps>=1?", 8, "a metric name, a number"),
        ("steps>=1>2", 8, "'&&', '||' or end of input"),
        ("()", 1, "a number or a metric name"),
    ],
)
def test_syntax_errors_give_position_and_expectation(text, position, expected):
    with pytest.raises(ConditionSyntaxError) as info:
        parse_condition(text, names=NAMES)
    err = info.value
    assert isinstance(err, ValueError)
    assert err.position == position
    assert expected in err.expected
    assert f"at position {position}" in str(err)
    assert repr(text) in str(err)


def test_non_string_is_type_error():
    with pytest.raises(TypeError, match="must be a str"):
        parse_condition(5)  # type: ignore[arg-type]


def test_unrestricted_names_and_missing_metric():
    cond = parse_condition("eval_score>=0.5")
    assert cond.evaluate({"eval_score": 0.7}) is True
    with pytest.raises(KeyError, match="eval_score"):
        cond.evaluate({"steps": 1})


def test_str_round_trip_and_equality():
    cond = parse_condition("(steps>1||episodes>=2)&&tasks<3||return==4", names=NAMES)
    again = parse_condition(str(cond), names=NAMES)
    assert again == cond
    assert hash(again) == hash(cond)
    assert isinstance(cond, Condition)
    # steps=0, episodes=0: (F||F)&&T || F -> False; steps=2: (T||F)&&T -> True.
    assert cond(dict.fromkeys(NAMES, 0.0)) is False
    assert cond({**dict.fromkeys(NAMES, 0.0), "steps": 2.0}) is True
    assert str(parse_condition("((a>1||b>1)||(c>1))&&(d>1&&e>1)")) == "(a>1.0||b>1.0||c>1.0)&&d>1.0&&e>1.0"


# -- property: the language means what the equivalent Python expression means --------------------------
_NAME_LIST = sorted(NAMES - {"success"})
_OPS = [">=", ">", "<=", "<", "=="]

_number_text = st.one_of(
    st.integers(0, 10**6).map(str),
    st.tuples(st.integers(0, 999), st.integers(0, 999)).map(lambda t: f"{t[0]}.{t[1]}"),
    st.tuples(st.integers(1, 9), st.integers(-5, 6)).map(lambda t: f"{t[0]}e{t[1]}"),
    st.tuples(st.integers(0, 99), st.integers(0, 99), st.sampled_from("eE"), st.integers(-3, 3)).map(
        lambda t: f"{t[0]}.{t[1]}{t[2]}{t[3]:+d}"
    ),
)
_operand = st.one_of(
    st.sampled_from(_NAME_LIST).map(lambda n: (n, f"m[{n!r}]")),
    _number_text.map(lambda s: (s, s)),
    _number_text.map(lambda s: ("-" + s, "-" + s)),
)
_space = st.sampled_from(["", " "])
_comparison = st.tuples(_operand, st.sampled_from(_OPS), _operand, _space).map(
    lambda t: (f"{t[0][0]}{t[3]}{t[1]}{t[3]}{t[2][0]}", f"({t[0][1]} {t[1]} {t[2][1]})")
)


def _combine(children):
    def join(op_text, op_py):
        return st.lists(children, min_size=2, max_size=3).map(
            lambda xs: (op_text.join(x[0] for x in xs), f" {op_py} ".join(x[1] for x in xs))
        )

    return st.one_of(
        join("&&", "and"),
        join("||", "or"),
        children.map(lambda x: (f"({x[0]})", f"({x[1]})")),
    )


_condition = st.recursive(_comparison, _combine, max_leaves=10)
_value = st.one_of(
    st.sampled_from([0.0, 1.0, -1.0, 5e5, 0.5, 10.0, 1e-3]),
    st.integers(-1000, 10**6).map(float),
    st.floats(-1e7, 1e7, allow_nan=False),
)


@given(_condition, st.fixed_dictionaries({n: _value for n in _NAME_LIST}))
def test_matches_python_semantics(pair, metrics):
    text, python_expr = pair
    cond = parse_condition(text, names=NAMES)
    expected = bool(eval(python_expr, {"__builtins__": {}}, {"m": metrics}))  # noqa: S307 - test-built text
    assert cond.evaluate(metrics) is expected
    # The canonical rendering parses back to the same tree.
    assert parse_condition(str(cond), names=NAMES) == cond

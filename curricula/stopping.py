"""A small text language for stopping conditions (used by :class:`~magister.curricula.sequential.Sequential`).

A condition compares metrics with numbers and combines comparisons with ``&&`` and ``||``, e.g.
``"return>=1.0&&episodes>=1000"`` or ``"steps>=5e5||tasks>=200"`` (the composite-condition interface of the
sequential curriculum in Syllabus, Sullivan et al., Supplementary A.4).

Grammar (``&&`` binds tighter than ``||``, as in C and Python's ``and``/``or``)::

    condition  := or_expr END
    or_expr    := and_expr ( "||" and_expr )*
    and_expr   := primary ( "&&" primary )*
    primary    := "(" or_expr ")" | comparison
    comparison := operand ( ">=" | ">" | "<=" | "<" | "==" ) operand
    operand    := NAME | [ "+" | "-" ] NUMBER
    NUMBER     := digits [ "." digits ] [ ("e" | "E") [ "+" | "-" ] digits ]   (also ".5", "5.")

Whitespace between tokens is ignored. Metric names are checked when the condition is parsed, so a typo
fails at construction, not hours into training. Every syntax error is a :class:`ConditionSyntaxError`
(a ``ValueError``) that gives the character position and what was expected there.

A metric whose value is NaN (for example the mean return before any episode has finished) makes every
comparison that uses it false.

>>> cond = parse_condition("return>=1.0&&episodes>=1000", names={"return", "episodes"})
>>> cond.evaluate({"return": 1.5, "episodes": 999})
False
>>> cond.evaluate({"return": 1.5, "episodes": 1000})
True
>>> sorted(cond.names)
['episodes', 'return']
>>> parse_condition("episodes>=", names={"episodes"})
Traceback (most recent call last):
...
magister.curricula.stopping.ConditionSyntaxError: invalid stopping condition 'episodes>=' at position 10: \
expected a number or a metric name, got end of input
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

logger = logging.getLogger(__name__)

__all__ = ["Condition", "ConditionSyntaxError", "parse_condition"]

#: Comparison operators and the functions that implement them.
_COMPARE = {
    ">=": lambda a, b: a >= b,
    ">": lambda a, b: a > b,
    "<=": lambda a, b: a <= b,
    "<": lambda a, b: a < b,
    "==": lambda a, b: a == b,
}

_NUMBER = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Longest operators first so ">=" is not read as ">" followed by "=".
_OPERATORS = (">=", "<=", "==", "&&", "||", ">", "<", "(", ")", "+", "-")


class ConditionSyntaxError(ValueError):
    """A malformed stopping condition.

    Attributes
    ----------
    text : str
        The condition as written.
    position : int
        0-based character position of the error in ``text``.
    expected : str
        What the parser expected at ``position``.
    """

    def __init__(self, text: str, position: int, expected: str, got: str) -> None:
        self.text = text
        self.position = position
        self.expected = expected
        self.got = got
        super().__init__(
            f"invalid stopping condition {text!r} at position {position}: expected {expected}, got {got}"
        )


@dataclass(frozen=True)
class _Token:
    kind: str  # "num", "name", "op", "end"
    text: str
    pos: int
    value: float = 0.0


def _describe(tok: _Token) -> str:
    return "end of input" if tok.kind == "end" else repr(tok.text)


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
            continue
        m = _NUMBER.match(text, i)
        if m:
            tokens.append(_Token("num", m.group(), i, float(m.group())))
            i = m.end()
            continue
        m = _NAME.match(text, i)
        if m:
            tokens.append(_Token("name", m.group(), i))
            i = m.end()
            continue
        for op in _OPERATORS:
            if text.startswith(op, i):
                tokens.append(_Token("op", op, i))
                i += len(op)
                break
        else:
            hint = {"=": "'=='", "&": "'&&'", "|": "'||'"}.get(c)
            expected = hint or "a metric name, a number, an operator (>= > <= < == && ||) or a parenthesis"
            raise ConditionSyntaxError(text, i, expected, repr(c))
    tokens.append(_Token("end", "", n))
    return tokens


# -- the syntax tree ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Operand:
    name: str | None
    value: float

    def get(self, metrics: Mapping[str, float]) -> float:
        if self.name is None:
            return self.value
        try:
            return float(metrics[self.name])
        except KeyError:
            raise KeyError(f"stopping condition needs metric {self.name!r}, got {sorted(metrics)}") from None

    def __str__(self) -> str:
        return self.name if self.name is not None else repr(self.value)


@dataclass(frozen=True)
class _Compare:
    left: _Operand
    op: str
    right: _Operand

    def evaluate(self, metrics: Mapping[str, float]) -> bool:
        a, b = self.left.get(metrics), self.right.get(metrics)
        if math.isnan(a) or math.isnan(b):
            return False
        return bool(_COMPARE[self.op](a, b))

    def __str__(self) -> str:
        return f"{self.left}{self.op}{self.right}"


@dataclass(frozen=True)
class _And:
    parts: tuple

    def evaluate(self, metrics: Mapping[str, float]) -> bool:
        return all(p.evaluate(metrics) for p in self.parts)

    def __str__(self) -> str:
        return "&&".join(f"({p})" if isinstance(p, _Or) else str(p) for p in self.parts)


@dataclass(frozen=True)
class _Or:
    parts: tuple

    def evaluate(self, metrics: Mapping[str, float]) -> bool:
        return any(p.evaluate(metrics) for p in self.parts)

    def __str__(self) -> str:
        return "||".join(str(p) for p in self.parts)


def _flatten(kind: type, parts: list):
    """One node for ``parts`` joined by ``kind``; ``(a||b)||c`` becomes ``a||b||c`` (both are associative)."""
    if len(parts) == 1:
        return parts[0]
    flat: list = []
    for p in parts:
        flat.extend(p.parts if isinstance(p, kind) else [p])
    return kind(tuple(flat))


class _Parser:
    def __init__(self, text: str, names: frozenset[str] | None) -> None:
        self.text = text
        self.names = names
        self.tokens = _tokenize(text)
        self.i = 0
        self.used: set[str] = set()

    @property
    def tok(self) -> _Token:
        return self.tokens[self.i]

    def error(self, expected: str) -> ConditionSyntaxError:
        return ConditionSyntaxError(self.text, self.tok.pos, expected, _describe(self.tok))

    def accept(self, op: str) -> bool:
        if self.tok.kind == "op" and self.tok.text == op:
            self.i += 1
            return True
        return False

    def parse(self):
        if self.tok.kind == "end":
            raise self.error("a comparison such as 'episodes>=100'")
        node = self.or_expr()
        if self.tok.kind != "end":
            expected = "'&&', '||' or end of input"
            if self.tok.kind == "op" and self.tok.text == ")":
                expected = "end of input (unbalanced ')')"
            raise self.error(expected)
        return node

    def or_expr(self):
        parts = [self.and_expr()]
        while self.accept("||"):
            parts.append(self.and_expr())
        return _flatten(_Or, parts)

    def and_expr(self):
        parts = [self.primary()]
        while self.accept("&&"):
            parts.append(self.primary())
        return _flatten(_And, parts)

    def primary(self):
        if self.accept("("):
            node = self.or_expr()
            if not self.accept(")"):
                raise self.error("')' or an operator ('&&', '||')")
            return node
        left = self.operand()
        if not (self.tok.kind == "op" and self.tok.text in _COMPARE):
            raise self.error("a comparison operator (>=, >, <=, <, ==)")
        op = self.tok.text
        self.i += 1
        right = self.operand()
        return _Compare(left, op, right)

    def operand(self) -> _Operand:
        tok = self.tok
        if tok.kind == "name":
            if self.names is not None and tok.text not in self.names:
                raise ConditionSyntaxError(
                    self.text, tok.pos, f"a metric name, one of {sorted(self.names)}", repr(tok.text)
                )
            self.i += 1
            self.used.add(tok.text)
            return _Operand(tok.text, math.nan)
        sign = 1.0
        if tok.kind == "op" and tok.text in "+-":
            sign = -1.0 if tok.text == "-" else 1.0
            self.i += 1
            if self.tok.kind != "num":
                raise self.error("a number after the sign")
        if self.tok.kind == "num":
            value = sign * self.tok.value
            self.i += 1
            return _Operand(None, value)
        raise self.error("a number or a metric name")


class Condition:
    """A parsed stopping condition: :meth:`evaluate` it on a ``{metric: value}`` mapping.

    Build one with :func:`parse_condition`. ``names`` is the set of metric names the condition reads.

    >>> c = parse_condition("a>1 || b>1 && a<0", names={"a", "b"})   # && binds tighter
    >>> c.evaluate({"a": 2, "b": 0}), c.evaluate({"a": -1, "b": 2}), c.evaluate({"a": 0.5, "b": 2})
    (True, True, False)
    >>> str(c)
    'a>1.0||b>1.0&&a<0.0'
    """

    def __init__(self, text: str, tree, names: frozenset[str]) -> None:
        self.text = text
        self._tree = tree
        self.names = names

    def evaluate(self, metrics: Mapping[str, float]) -> bool:
        """Whether the condition holds. Raises ``KeyError`` if a metric it reads is missing."""
        return self._tree.evaluate(metrics)

    __call__ = evaluate

    def __str__(self) -> str:
        return str(self._tree)

    def __repr__(self) -> str:
        return f"Condition({self.text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Condition) and self._tree == other._tree

    def __hash__(self) -> int:
        return hash(self._tree)


def parse_condition(text: str, names: Iterable[str] | None = None) -> Condition:
    """Parse a stopping condition.

    Parameters
    ----------
    text : str
        The condition, e.g. ``"return>=1.0&&episodes>=1000"``.
    names : iterable of str, optional
        The allowed metric names; any other name is a syntax error at its position. ``None`` allows any
        name (then a missing metric is a ``KeyError`` at evaluation).

    Raises
    ------
    TypeError
        If ``text`` is not a string.
    ConditionSyntaxError
        (a ``ValueError``) for malformed text, with the position and what was expected.

    >>> parse_condition("foo>=1", names={"steps"})
    Traceback (most recent call last):
    ...
    magister.curricula.stopping.ConditionSyntaxError: invalid stopping condition 'foo>=1' at position 0: \
expected a metric name, one of ['steps'], got 'foo'
    """
    if not isinstance(text, str):
        raise TypeError(f"a stopping condition must be a str, got {type(text).__name__}")
    parser = _Parser(text, None if names is None else frozenset(names))
    tree = parser.parse()
    return Condition(text, tree, frozenset(parser.used))

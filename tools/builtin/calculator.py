"""calculator: arithmetic on numbers, evaluated by walking the syntax tree (never eval)."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import Field

from tools.context import ToolContext
from tools.registry import tool

MAX_EXPRESSION_CHARS = 1000
# About 1000 decimal digits: far beyond any everyday sum, small enough to compute
# and print at once.
MAX_DIGITS = 1000
MAX_INT_BITS = int(MAX_DIGITS * math.log2(10)) + 1

Number = int | float

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
# What people paste from elsewhere: multiplication sign, division sign, minus sign, en dash.
_SYMBOLS = {"\u00d7": "*", "\u00f7": "/", "\u2212": "-", "\u2013": "-"}


class CalculationError(ValueError):
    """An expression the calculator refuses or cannot compute; the message says why."""


@tool(timeout=5)
def calculator(
    ctx: ToolContext,
    expression: Annotated[str, Field(min_length=1, max_length=MAX_EXPRESSION_CHARS)],
) -> dict[str, Any]:
    """Evaluate an arithmetic expression: numbers, + - * / // % **, signs and parentheses,
    e.g. "(2.5 + 4) / 3". Use it for any arithmetic rather than computing in your head.

    Args:
        expression: The arithmetic expression, with numbers only (no names or functions).
    """
    text = expression.strip()
    try:
        value = evaluate(text)
    except CalculationError as exc:
        return {
            "success": False,
            "error": str(exc),
            "expression": text,
            "message": f"Could not calculate {text}: {exc}",
        }
    shown = format_number(value)
    return {
        "success": True,
        "result": value,
        "expression": text,
        "message": f"{text} = {shown}",
    }


def evaluate(expression: str) -> Number:
    """The value of an arithmetic expression; CalculationError for anything else."""
    for symbol, replacement in _SYMBOLS.items():
        expression = expression.replace(symbol, replacement)
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculationError(f"The expression is longer than {MAX_EXPRESSION_CHARS} characters.")
    try:
        tree = ast.parse(expression, mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        raise CalculationError(
            "This is not a valid arithmetic expression. Use numbers, + - * / // % ** "
            "and parentheses, e.g. (2 + 3) * 4."
        ) from None
    try:
        value = _eval(tree.body)
    except RecursionError:
        raise CalculationError("The expression is nested too deeply.") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculationError("The result is too large to represent.")
    if isinstance(value, float):
        # 0.1 + 0.2 is 0.3 to a person: twelve significant digits hide binary noise.
        value = float(f"{value:.12g}")
        if value.is_integer() and abs(value) < 1e15:
            return int(value)
    return value


def _eval(node: ast.expr) -> Number:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise CalculationError(f"{node.value!r} is not a number.")
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _check(_UNARY[type(node.op)](_eval(node.operand)))
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.BitXor):
            raise CalculationError("^ is not a power here; use ** (2 ** 10).")
        if type(node.op) not in _BINARY:
            raise CalculationError(f"The operator in {ast.unparse(node)} is not supported.")
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        try:
            value = _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise CalculationError("Division by zero is undefined.") from None
        except OverflowError:
            raise CalculationError("The result is too large to represent.") from None
        return _check(value)
    raise CalculationError(_refusal(node))


def _check_power(base: Number, exponent: Number) -> None:
    # Refuse before computing: 9 ** 9 ** 9 would take the worker for minutes.
    if exponent > 0 and abs(base) > 1:
        digits = exponent * math.log10(abs(base))
        if digits > MAX_DIGITS:
            raise CalculationError(
                f"The result would have about {digits:.3g} digits; the limit is {MAX_DIGITS}."
            )
    if base == 0 and exponent < 0:
        raise CalculationError("Division by zero is undefined (0 to a negative power).")


def _check(value: Any) -> Number:
    if isinstance(value, complex):
        raise CalculationError("The result is not a real number.")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise CalculationError(f"The result has more than {MAX_DIGITS} digits.")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculationError("The result is too large to represent.")
    return value  # type: ignore[no-any-return]


def _refusal(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return f"Names such as {node.id!r} are not allowed; use numbers only."
    if isinstance(node, ast.Attribute):
        return "Attributes (a.b) are not allowed; use numbers only."
    if isinstance(node, ast.Call):
        return "Function calls are not allowed; use numbers and + - * / // % ** only."
    if isinstance(node, ast.Compare):
        return "Comparisons are not supported; the calculator does arithmetic only."
    if isinstance(node, ast.BoolOp):
        return "and/or are not supported; the calculator does arithmetic only."
    return f"{type(node).__name__} is not allowed; use numbers and + - * / // % ** only."


def format_number(value: Number) -> str:
    """A number as a person would write it (no binary noise, no trailing .0)."""
    if isinstance(value, int):
        return str(value)
    return f"{value:.12g}"

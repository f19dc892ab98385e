"""Safe arithmetic over named integers, for contract sizes and grid expressions.

Contracts say `bytes = "block_m * block_k * 2"`; we evaluate such text against facts without
`eval`: only integer literals, names, + - * / // % ( ) and min/max/ceil_div are allowed.
"""

from __future__ import annotations

import ast

_ALLOWED_CALLS = {"min": min, "max": max, "ceil_div": lambda a, b: -(-a // b)}


class ExprError(ValueError):
    pass


def names_in(text: str | int) -> set[str]:
    if isinstance(text, int):
        return set()
    tree = _parse(text)
    return {
        n.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Name) and n.id not in _ALLOWED_CALLS
    }


def _parse(text: str) -> ast.Expression:
    try:
        return ast.parse(str(text), mode="eval")
    except SyntaxError as e:
        raise ExprError(f"not an arithmetic expression: {text!r}") from e


def evaluate(text: str | int, env: dict[str, int]) -> int:
    if isinstance(text, bool):
        raise ExprError("a boolean is not a size")
    if isinstance(text, int):
        return text
    return _eval(_parse(text).body, env, str(text))


def _eval(node: ast.AST, env: dict[str, int], text: str) -> int:
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise ExprError(f"unknown name {node.id!r} in {text!r}")
        return int(env[node.id])
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _eval(node.operand, env, text)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp):
        a, b = _eval(node.left, env, text), _eval(node.right, env, text)
        op = node.op
        if isinstance(op, ast.Add):
            return a + b
        if isinstance(op, ast.Sub):
            return a - b
        if isinstance(op, ast.Mult):
            return a * b
        if isinstance(op, (ast.Div, ast.FloorDiv, ast.Mod)):
            if b == 0:
                raise ExprError(f"division by zero in {text!r}")
            return a % b if isinstance(op, ast.Mod) else a // b
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _ALLOWED_CALLS
        and not node.keywords
    ):
        return int(_ALLOWED_CALLS[node.func.id](*[_eval(a, env, text) for a in node.args]))
    raise ExprError(f"unsupported syntax in {text!r}")

"""Safe arithmetic over named integers, for contract sizes and grid expressions.

Contracts say `bytes = "block_m * block_k * 2"`; we evaluate such text against facts without
`eval`: only integer literals, names, + - * / // % ( ) and min/max/ceil_div are allowed.
"""

from __future__ import annotations

import ast

# Each takes a list of arguments: min(x) is x (Python's min(x) would want an iterable).
_ALLOWED_CALLS = {"min": min, "max": max, "ceil_div": lambda args: -(-args[0] // args[1])}


def _arity_error(call: ast.Call) -> str | None:
    name, n = call.func.id, len(call.args)
    if name == "ceil_div" and n != 2:
        return f"ceil_div() takes 2 arguments, not {n}"
    if name != "ceil_div" and n == 0:
        return f"{name}() takes at least 1 argument"
    return None


class ExprError(ValueError):
    pass


# Contract values are u32 and sizes; allowing any magnitude made "9"*5000 or a product of big
# literals fail in Python's int -> str limit (4,300 digits). No meaningful value is this large.
LIMIT = 2**64


def _bounded(v: int, text) -> int:
    if not -LIMIT <= v <= LIMIT:
        raise ExprError(f"a value in {_show(text)} is out of range (|value| > 2^64)")
    return v


# Real expressions nest about 10 levels; every pass over a tree (evaluation, ast.unparse in messages,
# the runtime's exact-division check) recurses per level, and past Python's recursion limit raised
# RecursionError from wherever it was first walked (an E-INTERNAL in pack or plan, a traceback at launch).
# Text a contract, kernel file or manifest states is held to MAX_DEPTH (names_in checks every one);
# BUILT_DEPTH is for the expressions the passes build from several of them (limits.py multiplies a
# tile's extents) and what evaluation takes.
MAX_DEPTH = 100
BUILT_DEPTH = 2 * MAX_DEPTH

_NODES = (ast.Expression, ast.Constant, ast.Name, ast.Load, ast.UnaryOp, ast.USub, ast.UAdd, ast.BinOp, ast.Add,
          ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Call)


def names_in(text: str | int, max_depth: int = MAX_DEPTH) -> set[str]:
    """The names an expression reads; raises ExprError for anything `evaluate` would refuse."""
    if isinstance(text, int):
        return set()
    tree = _parse(text, max_depth)
    for n in ast.walk(tree):
        bad = not isinstance(n, _NODES)
        if isinstance(n, ast.Constant):
            bad = not isinstance(n.value, int) or isinstance(n.value, bool)
            if not bad:
                _bounded(n.value, text)
        elif isinstance(n, ast.Call):
            bad = not isinstance(n.func, ast.Name) or n.func.id not in _ALLOWED_CALLS or bool(n.keywords)
            if not bad and (why := _arity_error(n)):
                raise ExprError(f"{why}, in {_show(text)}")
        if bad:
            raise ExprError(f"unsupported syntax in {_show(text)}")
    _constant_divisors(tree, text)
    return {
        n.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Name) and n.id not in _ALLOWED_CALLS
    }


def _has_name(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Name) and n.id not in _ALLOWED_CALLS for n in ast.walk(node))


def _constant_divisors(tree: ast.AST, text) -> None:
    """A divisor with no name in it is known now: zero would fail at every evaluation (at link
    time, or at every launch for a grid or workspace size), so it is refused when parsed."""
    for n in ast.walk(tree):
        div = (n.right if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Div, ast.FloorDiv, ast.Mod)) else
               n.args[1] if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "ceil_div" and len(n.args) == 2
               else None)
        if div is None or _has_name(div):
            continue
        try:
            zero = _eval(div, {}, text) == 0
        except RecursionError:  # a divisor nested past Python's recursion limit
            raise ExprError(f"expression nested too deeply: {_show(text)}") from None
        if zero:
            raise ExprError(f"division by zero in {_show(text)} (the divisor {_show(ast.unparse(div))} is always 0)")


def constant_value(text: str | int) -> int | None:
    """The value of an expression that names nothing (checked like an integer), else None."""
    if isinstance(text, int):
        return text
    names_in(text)
    tree = _parse(text)
    return None if _has_name(tree) else evaluate(text, {})


def _show(text) -> str:
    t = text if isinstance(text, str) else repr(text) if not isinstance(text, int) or abs(text) < 10**100 else "<huge integer>"
    return repr(t if len(t) <= 80 else t[:77] + "...")


def _parse(text: str, max_depth: int = BUILT_DEPTH) -> ast.Expression:
    if len(str(text)) > 10_000:
        raise ExprError(f"expression too long ({len(str(text))} characters)")
    if not str(text).isascii():  # Python reads names NFKC-normalised: "ｔile" and "ﬁle" would be tile and file
        raise ExprError(f"non-ASCII character in {_show(text)}: names are C identifiers")
    # ValueError: a NUL byte; RecursionError/MemoryError: absurdly nested input.
    try:
        tree = ast.parse(str(text), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise ExprError(f"not an arithmetic expression: {_show(text)}") from None
    stack = [(tree, 1)]
    while stack:  # iteratively: the depth is measured before anything recurses over the tree
        node, depth = stack.pop()
        if depth > max_depth:
            raise ExprError(f"expression nested too deeply (more than {max_depth} levels): {_show(text)}")
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return tree


def evaluate(text: str | int, env: dict[str, int]) -> int:
    if isinstance(text, bool):
        raise ExprError("a boolean is not a size")
    if isinstance(text, int):
        return _bounded(text, "<integer>")
    if len(text) > 10_000:
        raise ExprError(f"expression too long ({len(text)} characters): {_show(text)}")
    try:
        return _eval(_parse(text).body, env, text)
    except RecursionError:
        raise ExprError(f"expression nested too deeply: {_show(text)}") from None


def _eval(node: ast.AST, env: dict[str, int], text: str) -> int:
    return _bounded(_eval_node(node, env, text), text)


def _eval_node(node: ast.AST, env: dict[str, int], text: str) -> int:
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
                raise ExprError(f"division by zero in {_show(text)}")
            return a % b if isinstance(op, ast.Mod) else a // b
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _ALLOWED_CALLS
        and not node.keywords
    ):
        if why := _arity_error(node):
            raise ExprError(f"{why}, in {_show(text)}")
        args = [_eval(a, env, text) for a in node.args]
        if node.func.id == "ceil_div" and args[1] == 0:
            raise ExprError(f"division by zero in {_show(text)}")
        return int(_ALLOWED_CALLS[node.func.id](args))
    raise ExprError(f"unsupported syntax in {_show(text)}")


SAMPLE_VALUES = (1, 2, 3, 64, 1000, 2**16, 2**20, 2**31 - 1)


def never_valid(text: str | int, lo: int, hi: int = LIMIT) -> str | None:
    """Why an expression over run-time names (a grid extent, a workspace size) can never give a
    value in lo..hi, or None. It is evaluated with every name at each of SAMPLE_VALUES: only when
    every sample fails (out of range, division by zero, or outside lo..hi) is it refused, so an
    expression that some launch can use always passes."""
    if isinstance(text, int) or not names_in(text):
        return None  # constants are checked exactly where they are parsed
    seen = []
    for v in SAMPLE_VALUES:
        try:
            got = evaluate(text, {n: v for n in names_in(text)})
        except ExprError as e:
            seen.append(f"{v}: " + ("beyond 2^64" if "out of range" in str(e) else
                                    "division by zero" if "division by zero" in str(e) else str(e)))
            continue
        if lo <= got <= hi:
            return None
        seen.append(f"{v}: {got}")
    return (f"{_show(text)} is outside {lo}..{'2^64' if hi == LIMIT else hi} for every value tried (every name = "
            + "; ".join(seen[:3]) + ("; ..." if len(seen) > 3 else "") + ")")

"""A command template rendered for one run: `--n_embd={width} --learning_rate={lr} --n_head={width//64}`.

A placeholder is a small expression between braces over the run's values: names
(`width`, `lr`, `log2_lr`, `seed`, `run_dir`) and dotted config keys
(`train.steps`, `trainer.vars.n_head`), numbers, `+ - * / // % **`, unary minus and
`int float round min max abs`. It is parsed by Python's `ast` and evaluated node by node
here, never by `eval`: a template can compute a derived value but cannot call anything
else or reach any object. `{{` and `}}` are literal braces.

A float renders as a float (`1.0`, `0.0009765625`: Python's shortest repr, which
reads back exactly), an int as an int, a bool as `True`/`False`: nanoGPT's
configurator refuses an int for a float setting.
"""

from __future__ import annotations

import ast
import json
import math
import operator

from lrtransfer.errors import ConfigError, choices

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_CALLS = {"int": int, "round": round, "min": min, "max": max, "abs": abs, "float": float}
MAX_EXPONENT = 1024  # `2**x` with a larger |x| is refused: an int power that large is no setting


def parts(text: str, where: str) -> list[tuple[bool, str]]:
    """The template as (is_placeholder, text) pieces; `{{`/`}}` are literal braces."""
    out, i, literal = [], 0, []
    while i < len(text):
        c = text[i]
        if c in "{}" and text[i + 1 : i + 2] == c:
            literal.append(c)
            i += 2
        elif c == "{":
            end = text.find("}", i + 1)
            if end < 0:
                raise ConfigError(f"{where}: '{{' at character {i + 1} has no closing '}}' (write '{{{{' for a literal brace)")
            out += [(False, "".join(literal)), (True, text[i + 1 : end].strip())]
            literal, i = [], end + 1
        elif c == "}":
            raise ConfigError(f"{where}: '}}' at character {i + 1} closes no placeholder (write '}}}}' for a literal brace)")
        else:
            literal.append(c)
            i += 1
    out.append((False, "".join(literal)))
    return [(p, s) for p, s in out if p or s]


def placeholders(text: str, where: str) -> list[str]:
    return [s for p, s in parts(text, where) if p]


def render(text: str, values: dict, where: str) -> str:
    """`text` with each placeholder replaced by its value (see `shown`)."""
    return "".join(shown(evaluate(s, values, where)) if p else s for p, s in parts(text, where))


def shown(value) -> str:
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        return repr(value)  # 1.0, not 1; 0.0009765625; 1e-05
    if isinstance(value, (int, str)):
        return str(value)
    return json.dumps(value)  # a list or mapping key: as JSON


def evaluate(expression: str, values: dict, where: str = "trainer.command"):
    """The value of one placeholder's expression over `values` (dotted keys -> values)."""
    if not expression:
        raise ConfigError(f"{where}: an empty placeholder '{{}}'; name a key, e.g. {{width}}")
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:
        raise ConfigError(f"{where}: {{{expression}}} is not a key or an arithmetic expression "
                          "(keys, numbers, + - * / // % **, int float round min max abs)") from None
    try:
        return _value(tree.body, values, expression, where)
    except (ZeroDivisionError, OverflowError, TypeError, ValueError) as e:
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(f"{where}: {{{expression}}} cannot be computed ({e.__class__.__name__}: {e})") from None


def _value(node, values: dict, expression: str, where: str):
    def bad(what: str):
        return ConfigError(f"{where}: {{{expression}}}: {what} is not allowed in a placeholder "
                           "(keys, numbers, + - * / // % **, int float round min max abs)")

    if isinstance(node, ast.Constant):
        if isinstance(node.value, (int, float, str)) and not isinstance(node.value, bool):
            return node.value
        raise bad(repr(node.value))
    if isinstance(node, (ast.Name, ast.Attribute)):
        key = _dotted(node)
        if key is None:
            raise bad("that attribute")
        if key not in values:
            raise ConfigError(f"{where}: {{{expression}}} names no key '{key}'{choices(_nearby(values, key), key)}")
        return values[key]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = (_value(n, values, expression, where) for n in (node.left, node.right))
        for v in (left, right):
            if not _number(v):
                raise ConfigError(f"{where}: {{{expression}}}: arithmetic on {v!r}, which is not a number")
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ConfigError(f"{where}: {{{expression}}}: an exponent of {right!r} is beyond {MAX_EXPONENT}")
        result = _BINARY[type(node.op)](left, right)
        if isinstance(result, complex) or (isinstance(result, float) and not math.isfinite(result)):
            raise ConfigError(f"{where}: {{{expression}}} is {result!r}, not a finite number")
        return result
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        v = _value(node.operand, values, expression, where)
        if not _number(v):
            raise ConfigError(f"{where}: {{{expression}}}: arithmetic on {v!r}, which is not a number")
        return _UNARY[type(node.op)](v)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS and not node.keywords:
        args = [_value(a, values, expression, where) for a in node.args]
        if not all(map(_number, args)):
            raise ConfigError(f"{where}: {{{expression}}}: {node.func.id}() takes numbers")
        return _CALLS[node.func.id](*args)
    raise bad(type(node).__name__)


def _dotted(node) -> str | None:
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(names)])


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _nearby(values: dict, key: str) -> list[str]:
    """The keys worth listing after a mistyped one: the run's own values and those of the same section."""
    own = [k for k in values if "." not in k]
    section = key.rpartition(".")[0]
    return own + [k for k in values if section and k.startswith(section + ".")]

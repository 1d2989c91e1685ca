"""The Jinja environment chat templates run in: the immutable sandbox, with the budget of :mod:`.sandbox`.

Imported only when a template is compiled (it imports ``jinja2``). Loops, ``~`` and ``+`` are counted
through a rewrite of the template's syntax tree: each ``for``'s iterable, each concatenation and each
chain ``a + b + c`` goes through one of this module's filters (a template variable cannot shadow them).
``*``, ``**`` and ``%`` go through the sandbox's intercepted operators, calls through its ``call``,
filters through wrappers that check their arguments first, and the text through ``finalize`` and the
renderer's count of what is written.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any, Iterable

from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

from . import sandbox as sb


def _loop(iterable: Any) -> Any:
    """A ``for``'s iterable, counted: whole as the loop starts when it has a length, else as it goes."""
    if type(iterable) is range:  # counted when range() made it
        return iterable
    try:
        n = len(iterable)
    except TypeError:  # a generator (a filter's)
        return _counted(iterable)
    sb.steps(n, lambda: f"a loop over {n:,} items")
    return iterable


def _counted(iterable: Iterable) -> Iterable:
    for i, item in enumerate(iterable):
        if i % 256 == 0:
            sb.steps(256, "a loop")
        yield item


def _concat(*parts: Any) -> str:
    """``a ~ b ~ ...``."""
    sb.made(sb.join_size("", list(parts)), "'~'")
    return "".join(map(str, parts))


def _add(first: Any, *rest: Any) -> Any:
    """``a + b + ...``, folded from the left; two strings make their sum without a check when it is small."""
    if type(first) is str:  # the common case, kept cheap
        n = len(first)
        for p in rest:
            if type(p) is not str:
                break
            n += len(p)
        else:
            if n > _SMALL:
                sb.made(n, lambda: f"{first!r:.20} + ...")
            return "".join((first, *rest))
    out = first
    for right in rest:
        sb.made(_binop_size("+", out, right), lambda a=out, b=right: f"{a!r:.20} + {b!r:.20}")
        out = out + right
    return out


# what the rewritten tree calls, as filters: compiled as direct calls, and no template variable shadows them
_GUARDS = {"shardstream_loop": _loop, "shardstream_concat": _concat, "shardstream_add": _add}


class _Rewrite(NodeTransformer):
    def visit_For(self, node: nodes.For) -> nodes.Node:
        node = self.generic_visit(node)
        node.iter = _guard("shardstream_loop", node.iter, [], node.lineno)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        node = self.generic_visit(node)
        return _guard("shardstream_concat", node.nodes[0], node.nodes[1:], node.lineno)

    def visit_Add(self, node: nodes.Add) -> nodes.Node:
        node = self.generic_visit(node)
        left = node.left
        if isinstance(left, nodes.Filter) and left.name == "shardstream_add":  # a + b + c: one call
            return _guard("shardstream_add", left.node, [*left.args, node.right], node.lineno)
        return _guard("shardstream_add", left, [node.right], node.lineno)


def _guard(name: str, first: nodes.Node, rest: list, lineno: int) -> nodes.Filter:
    return nodes.Filter(first, name, list(rest), [], None, None, lineno=lineno)


class BoundedEnvironment(ImmutableSandboxedEnvironment):
    """The sandbox with the budget (see the module docstring)."""

    intercepted_binops = frozenset({"*", "**", "%"})  # and + (rewritten as a filter, see _Rewrite)

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(finalize=_finalize, **kwargs)
        self.globals["range"] = _range
        self.globals.pop("lipsum", None)  # lipsum(n) writes n paragraphs: no chat template needs it
        for name, fn in list(self.filters.items()):
            self.filters[name] = _guarded_filter(name, fn)
        self.filters.update(_GUARDS)

    @staticmethod
    def guard_filter(name: str, fn: Any) -> Any:
        """``fn`` as the filter ``name``, its arguments checked first (for filters added after this)."""
        return _guarded_filter(name, fn)

    def compile_bounded(self, source: str) -> Any:
        """The template of ``source``, its loops and ``~`` counted."""
        tree = _Rewrite().visit(self.parse(source))
        return self.from_string(tree)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        sb.made(_binop_size(operator, left, right), lambda: f"{left!r:.20} {operator} {right!r:.20}")
        return self.binop_table[operator](left, right)

    def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        sb.steps(1, "calls")
        target = getattr(obj, "__wrapped__", obj)
        owner = getattr(target, "__self__", None)
        if isinstance(owner, str) and not isinstance(obj, type):
            name = getattr(target, "__name__", "")
            sb.ints(args, kwargs, lambda: f"str.{name}'s argument")
            if name == "join" and args:
                items = list(args[0])
                sb.steps(len(items), "str.join")
                sb.made(sb.join_size(owner, items), "str.join")
                args = (items,) + args[1:]
            else:
                grown = sb.str_method_size(owner, name, args, kwargs)
                if grown is not None:
                    sb.made(grown, lambda: f"str.{name}")
        return super().call(context, obj, *args, **kwargs)


_SMALL = 1 << 12  # characters a `+` of two strings makes without being counted (a template writes few per loop)


def _binop_size(operator: str, left: Any, right: Any) -> int:
    if operator == "*":
        seq, n = (left, right) if isinstance(right, int) else (right, left)
        if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
            return len(seq) * max(n, 0)  # characters, or items (their text is checked where it is written)
        return 0
    if operator == "**":
        if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
            return (right * abs(left).bit_length()) // 8  # bytes of the result
        return 0
    if operator == "+":
        if isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
            return len(left) + len(right)
        return 0
    if isinstance(left, str):  # %
        return sb.percent_size(left, right)
    return 0


def _range(*args: Any) -> range:
    sb.ints(args, {}, "range()'s bound")
    r = range(*args)
    sb.made(len(r), "range()")
    sb.steps(len(r), lambda: f"range() of {len(r):,} items")
    return r


def _finalize(value: Any) -> Any:
    """Each ``{{ value }}`` before it is written: its text may not pass ``max_chars``."""
    if not isinstance(value, str):
        sb.made(sb.size(value), "the text of a value")
    return value


def _guarded_filter(name: str, fn: Any) -> Any:
    skip = 0 if getattr(fn, "jinja_pass_arg", None) is None else 1  # context / environment first

    @functools.wraps(fn)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        sb.steps(1, "filters")
        value, rest = (args[skip], args[skip + 1:]) if len(args) > skip else (None, ())
        sb.ints(rest, kwargs, lambda: f"the {name} filter's argument")
        if name in ("join", "sum", "list") and value is not None and not hasattr(value, "__len__"):
            value = list(itertools.islice(value, sb.limits().max_chars + 1))
            args = args[:skip] + (value,) + args[skip + 1:]
        sb.made(_filter_size(name, value, rest, kwargs), lambda: f"the {name} filter")
        if name == "sum":
            return _sum(fn, args, kwargs, skip)
        return fn(*args, **kwargs)
    return guarded


def _filter_size(name: str, value: Any, rest: tuple, kwargs: dict) -> int:
    if name == "center":
        width = rest[0] if rest else kwargs.get("width", 80)
        return max(sb.size(value), width if isinstance(width, int) else 0)
    if name == "indent":
        width = rest[0] if rest else kwargs.get("width", 4)
        text = str(value) if isinstance(value, str) else ""
        return sb.size(value) + (text.count("\n") + 1) * (width if isinstance(width, int) else sb.size(width))
    if name == "join":
        sep = rest[0] if rest else kwargs.get("d", "")
        return sb.join_size(sep if isinstance(sep, str) else "", list(value or ()))
    if name == "replace" and isinstance(value, str):
        return sb.replace_size(value, *rest[:3])
    if name == "format" and isinstance(value, str):
        return sb.percent_size(value, kwargs if kwargs else tuple(rest))
    if name == "wordwrap":
        width = rest[0] if rest else kwargs.get("width", 79)
        wrap = rest[2] if len(rest) > 2 else kwargs.get("wrapstring") or "\n"
        n = sb.size(value)
        return n + (n // max(width if isinstance(width, int) else 1, 1) + 1) * sb.size(wrap)
    if name == "tojson":
        indent = rest[1] if len(rest) > 1 else kwargs.get("indent")
        return sb.size(value) * (2 + (indent if isinstance(indent, int) else sb.size(indent or "")))
    if name in ("string", "pprint", "list", "sum", "e", "escape", "forceescape", "urlize"):
        return 2 * sb.size(value)
    return 0


def _sum(fn: Any, args: tuple, kwargs: dict, skip: int) -> Any:
    """``sum`` of sequences in linear time (the builtin adds them one by one: quadratic)."""
    attribute = args[skip + 1] if len(args) > skip + 1 else kwargs.get("attribute")
    start = args[skip + 2] if len(args) > skip + 2 else kwargs.get("start", 0)
    if attribute is not None or not isinstance(start, (list, tuple)):
        return fn(*args, **kwargs)
    items = args[skip]
    return type(start)(itertools.chain(start, *items))

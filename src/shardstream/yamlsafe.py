"""YAML read with PyYAML's safe loader, bounded against alias bombs.

PyYAML shares an aliased value (``&anchor`` / ``*alias``) rather than copying it, so a kilobyte of
nested aliases loads at once yet stands for a billion values ("billion laughs"), and whatever walks
the result (validation, an error message's ``repr``) walks them all. :func:`load_bounded` sizes the
document's node graph, aliases expanded, before it is built, in O(its nodes), and refuses a document
past :data:`MAX_ALIAS_EXPANSION` values or one whose aliases refer to themselves.
"""

from __future__ import annotations

from typing import Any

#: values a YAML text may expand to through its aliases beyond what it writes out
MAX_ALIAS_EXPANSION = 100_000


def load_bounded(yaml: Any, text: str, where: str, error: type, what: str) -> Any:
    """The data of the YAML ``text`` (``yaml``: the PyYAML module), or ``error`` naming ``where`` when its
    aliases expand it past :data:`MAX_ALIAS_EXPANSION` values or make it recursive; ``what`` names the
    kind of document in the message ("pipeline configuration", "dataset card"). Syntax errors are
    PyYAML's own ``YAMLError``, for the caller to word."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_aliases(node, where, error, what)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check_aliases(root: Any, where: str, error: type, what: str) -> None:
    sizes: dict = {}  # id(node) -> values it expands to
    open_ = set()  # ids of the nodes being expanded (the path from the root)
    stack, shared = [(root, False)], False
    while stack:
        node, done = stack.pop()
        key = id(node)
        kids = _children(node)
        if done:
            open_.discard(key)
            sizes[key] = total = 1 + sum(sizes[id(k)] for k in kids)
            if shared and total > MAX_ALIAS_EXPANSION:
                raise error(f"{where}: its aliases (&anchor / *alias) make it stand for more than "
                            f"{MAX_ALIAS_EXPANSION:,} values, which no {what} needs; write the values out, "
                            "or remove the nested aliases")
            continue
        if key in sizes:
            shared = True
            continue
        if key in open_:
            raise error(f"{where}: an alias (*name) refers to a value that contains it (a recursive YAML "
                        f"structure); a {what} is a tree: write the value out")
        open_.add(key)
        stack.append((node, True))
        stack.extend((k, False) for k in kids)


def _children(node: Any) -> list:
    value = node.value
    if isinstance(value, str):
        return []
    if value and isinstance(value[0], tuple):  # a mapping: (key, value) pairs
        return [n for pair in value for n in pair]
    return list(value)

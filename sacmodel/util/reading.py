"""Reading users' files safely: limits on what a parsed document may hold."""
from __future__ import annotations

from typing import Any


def check_tree(data: Any, where: str, *, depth: int, items: int, err: type[Exception] = ValueError) -> None:
    """Refuse a parsed YAML/JSON document nested deeper than ``depth``, larger than ``items`` values (aliases
    expanded, so recursive or exponential YAML aliases stop here) or with a mapping key that is not a
    string. Raises ``err`` naming ``where`` and the path."""
    stack = [(data, 0, "")]
    seen = 0
    while stack:
        node, level, path = stack.pop()
        seen += 1
        if seen > items:
            raise err(f"{where}: more than {items} values (aliases expanded); limit {items}")
        if isinstance(node, (dict, list)):
            if level >= depth:
                raise err(f"{where}: {path or 'document'}: nested deeper than {depth} levels")
            if isinstance(node, dict):
                for k, v in node.items():
                    if not isinstance(k, str):
                        raise err(f"{where}: {path or 'document'}: key {k!r} is not a string")
                    stack.append((v, level + 1, f"{path}.{k}" if path else k))
            else:
                stack.extend((v, level + 1, f"{path}[{i}]") for i, v in enumerate(node))

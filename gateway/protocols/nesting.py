"""A bound on how deeply a request's JSON may nest, checked once, where it is parsed. Pure.

Without it, a legal-looking body nested ~300 levels deep parsed fine (orjson reads up to 1,024
levels) and then failed inside the gateway as a 500: orjson serialises at most 254 levels, and
recursive helpers (the routing session key, `cache_control` stripping) walk the body. A body
within this bound stays far from every such limit, so nothing downstream needs its own check.

Cost: the walk visits containers only, never the text: ~1 µs for the benchmark's 100k-token
request (a handful of containers; orjson.loads of it takes ~80 µs). Counting brackets in the raw
body first, to skip the walk, cost ~360 µs there (two scans of 400 kB), so it is not done.
"""

from __future__ import annotations

# Anthropic's request shapes nest about 10 deep (a JSON schema inside a tool a few more);
# 64 leaves room for real schemas and tool inputs and stays far below 254.
MAX_NESTING = 64


def nesting_exceeds(value: object, limit: int = MAX_NESTING) -> bool:
    """Whether `value` nests deeper than `limit` levels (iterative: no recursion to overflow)."""
    if not isinstance(value, (dict, list)):
        return False
    stack: list[tuple[dict[object, object] | list[object], int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node
        for child in children:
            if isinstance(child, (dict, list)):
                if depth >= limit:
                    return True
                stack.append((child, depth + 1))
    return False


def nesting_message(where: str, limit: int = MAX_NESTING) -> str:
    return f"{where}: nested more than {limit} levels deep (the nesting limit is {limit})"

"""A structure-aware mutator for the decoders that read JSON (libFuzzer's custom mutator hook).

Byte-level mutation of a JSON document mostly yields text that is not JSON, which the parser
refuses before the decoder sees it. Half of the time this mutator parses the input instead,
changes one node of the tree (replaces it with an interesting value, deletes or duplicates a key,
wraps it in a list or object, swaps in a known field name) and writes JSON again; the other half,
and whenever the input is not JSON, it leaves the bytes to libFuzzer's own mutations.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from typing import Any

INTERESTING: tuple[Any, ...] = (
    None, True, False, 0, -1, 1, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**30, 0.5, -0.0, 1e308,
    "", "0", "x" * 70, "00", "zz", "0x" + "ab" * 32, "\u0000", "\ud800", "é", "PULL", "CIPHERTEXT", "PLAINTEXT",
    "tags.", "tags.a", "kind", "sequence", "eq", "in", "exists", "gte", [], {}, [None], {"$bytes": "00"},
    {"$bytes": "zz"}, {"$bytes": 1},
)
KEYS: tuple[str, ...] = (
    "v", "ok", "result", "error", "code", "message", "details", "command", "register_feed", "method", "stream_id",
    "caller_public_key_hex", "nonce", "body", "signature_hex", "field", "op", "value", "all", "any", "not",
    "payload_inline_hex", "payload_hash_hex", "publisher_sig_hex", "tags", "kind", "sequence", "timestamp_unix_ms",
    "payload_format", "key_epoch", "signing_key_id", "version", "content_type", "feed", "filter", "mode", "$bytes",
)


def _interesting(rng: random.Random) -> Any:
    # A copy: a shared list or dict placed in two documents (or twice in one) would be mutated
    # through both, which corrupts this table and can make a document circular.
    return copy.deepcopy(rng.choice(INTERESTING))


def _nodes(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if len(path) >= 24:  # deeper nodes stay as they are (and Python's stack stays small)
        return out
    if isinstance(value, dict):
        for key, item in value.items():
            out += _nodes(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += _nodes(item, (*path, i))
    return out


def _replace(root: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    parent = root
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = new
    return root


def _mutate_node(node: Any, rng: random.Random) -> Any:
    choice = rng.randrange(7)
    if choice == 0:
        return _interesting(rng)
    if choice == 1 and isinstance(node, dict) and node:
        node.pop(rng.choice(list(node)))
        return node
    if choice == 2 and isinstance(node, dict):
        node[rng.choice(KEYS)] = _interesting(rng)
        return node
    if choice == 3:
        return [node] if rng.random() < 0.5 else {rng.choice(KEYS): node}
    if choice == 4 and isinstance(node, list) and node:
        return node + [copy.deepcopy(rng.choice(node)) for _ in range(rng.randrange(1, 20))]
    if choice == 5 and isinstance(node, str):
        return node[: rng.randrange(len(node) + 1)] + rng.choice(("", "0", "g", "\u00e9", "."))
    if choice == 6 and isinstance(node, int | float) and not isinstance(node, bool):
        return rng.choice((node + 1, node - 1, -node, node * 2**32, float(node), str(node)))
    return _interesting(rng)


def mutate_json(data: bytes, max_size: int, seed: int, fallback: Callable[[bytes, int], bytes]) -> bytes:
    """One structural mutation of `data` when it is JSON (half of the time), else `fallback`'s."""
    rng = random.Random(seed)  # noqa: S311 - fuzzing, not cryptography
    if rng.random() < 0.5:
        return fallback(data, max_size)
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return fallback(data, max_size)
    try:
        for _ in range(rng.randrange(1, 4)):
            path = rng.choice(_nodes(doc))
            target = doc
            for step in path:
                target = target[step]
            doc = _replace(doc, path, _mutate_node(target, rng))
        out = json.dumps(doc).encode()
    except (ValueError, OverflowError, RecursionError, KeyError, IndexError, TypeError):
        # float() of a 400-digit integer, str() of a longer one, a tree too deep to write: the
        # mutator's own limits, not the decoder's, so libFuzzer's mutation is used instead.
        return fallback(data, max_size)
    return out if len(out) <= max_size else fallback(data, max_size)

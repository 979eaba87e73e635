"""The compiled predicates of the filters reads name, kept for the next read of the same filter.

A ``get_since`` filter (CIP-7's filter DSL) is parsed and compiled once per distinct filter and
proof requirement; at most `_MAX_FILTERS` are kept, the oldest dropped first, so clients sending
endless distinct filters cost bounded memory.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from watchtower.protocol.page.proof import require_provable
from watchtower.protocol.stream.filters import compile_filter, parse_filter


def compiled_filter(filter_spec: object, proof: bool) -> Callable[[Mapping[str, Any]], bool] | None:
    """The filter's predicate (None: no filter, every message matches); INVALID_FILTER as the spec
    says, and with `proof` also for a filter a proof cannot cover. Compiled once per distinct filter."""
    if filter_spec is None and not proof:
        return None
    key = filter_spec if isinstance(filter_spec, str) else json.dumps(filter_spec, sort_keys=True)
    return _compile_cached(key, filter_spec, proof)


def _compile_cached(key: str, filter_spec: object, proof: bool) -> Callable[[Mapping[str, Any]], bool]:
    cached = _FILTERS.get((key, proof))
    if cached is None:
        node = parse_filter(filter_spec)
        if proof:
            require_provable(node)
        cached = compile_filter(node)
        if len(_FILTERS) >= _MAX_FILTERS:
            _FILTERS.pop(next(iter(_FILTERS)))
        _FILTERS[(key, proof)] = cached
    return cached


_MAX_FILTERS = 1024
_FILTERS: dict[tuple[str, bool], Callable[[Mapping[str, Any]], bool]] = {}

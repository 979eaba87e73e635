"""Every decoder keeps its contract on hostile bytes: a value, or a WatchtowerError with a spec code.

A short fixed-seed run per decoder (hypothesis, derandomized: the same inputs on every run), and a
replay of the whole committed corpus and of every input that ever crashed a decoder
(``fuzz/crashes/<decoder>/``), through the same targets the coverage-guided fuzzer runs.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from byte_mutations import mutated_bytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fuzz.targets import DECODERS, Target, build, seeds

FUZZ = Path(__file__).resolve().parents[2] / "fuzz"
EXAMPLES = 200
FIXED = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                 suppress_health_check=list(HealthCheck))


@cache
def targets() -> dict[str, Target]:
    return build()


@cache
def valid_inputs() -> dict[str, list[bytes]]:
    return seeds()


def _files(kind: str, decoder: str) -> list[Path]:
    folder = FUZZ / kind / decoder
    return sorted(folder.iterdir()) if folder.is_dir() else []


@st.composite
def mutated(draw: st.DrawFn, decoder: str) -> bytes:
    """A valid input of `decoder` with a few bytes flipped, cut, inserted or dropped."""
    return draw(mutated_bytes(draw(st.sampled_from(valid_inputs()[decoder]))))


_JSON: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=12)
    | st.sampled_from(["kind", "tags.a", "eq", "in", "exists", "PULL", "CIPHERTEXT", "00", "create_stream"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8) | st.sampled_from(
        ["v", "ok", "error", "code", "command", "field", "op", "value", "all", "any", "not", "body", "nonce"]),
        inner, max_size=4),
    max_leaves=12,
)


def _inputs(decoder: str) -> st.SearchStrategy[bytes]:
    return st.binary(max_size=256) | mutated(decoder) | _JSON.map(lambda v: json.dumps(v).encode())


@pytest.mark.parametrize("decoder", DECODERS)
def test_fixed_seed_inputs_get_a_value_or_a_spec_error(decoder: str) -> None:
    target = targets()[decoder]

    @FIXED
    @given(data=_inputs(decoder))
    def run(data: bytes) -> None:
        target(data)

    run()


@pytest.mark.parametrize("decoder", DECODERS)
def test_committed_corpus_and_past_crashes_replay_without_a_crash(decoder: str) -> None:
    files = _files("corpus", decoder) + _files("crashes", decoder)
    assert _files("corpus", decoder), f"fuzz/corpus/{decoder}/ has no seed inputs (python -m fuzz.run --write-seeds)"
    target = targets()[decoder]
    for path in files:
        try:
            target(path.read_bytes())
        except Exception as exc:
            raise AssertionError(f"{path.relative_to(FUZZ)} crashes {decoder}: {exc!r}") from exc


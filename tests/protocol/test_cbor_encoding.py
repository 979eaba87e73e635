"""Deterministic CBOR: RFC 8949 Appendix A answers and the §4.2.1 ordering rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from protocol_strategies import PROPERTY

from watchtower.protocol import cbor
from watchtower.protocol.errors import InvalidArgumentError


@pytest.mark.parametrize(
    ("value", "expected_hex"),
    [
        (0, "00"),
        (23, "17"),
        (24, "1818"),
        (100, "1864"),
        (1000, "1903e8"),
        (1000000, "1a000f4240"),
        (1000000000000, "1b000000e8d4a51000"),
        (2**64 - 1, "1bffffffffffffffff"),
        (-1, "20"),
        (-1000, "3903e7"),
        (-(2**64), "3bffffffffffffffff"),
        (1.5, "f93e00"),
        (100000.0, "fa47c35000"),
        (1.1, "fb3ff199999999999a"),
        (float("nan"), "f97e00"),
        (float("inf"), "f97c00"),
        (cbor.Float64(1.5), "fb3ff8000000000000"),
        (cbor.Float64(12), "fb4028000000000000"),
        (False, "f4"),
        (True, "f5"),
        (None, "f6"),
        (b"", "40"),
        (b"\x01\x02\x03\x04", "4401020304"),
        ("", "60"),
        ("a", "6161"),
        ("\u00fc", "62c3bc"),
        ([1, [2, 3], [4, 5]], "8301820203820405"),
        ({"a": 1, "b": [2, 3]}, "a26161016162820203"),
    ],
)
def test_rfc8949_appendix_a(value: object, expected_hex: str) -> None:
    assert cbor.encode(value).hex() == expected_hex


def test_map_keys_sort_by_encoded_bytes_not_python_order() -> None:
    # Python sorts "aa" < "b"; CBOR sorts the shorter encoding (0x61 'b') first.
    assert cbor.encode({"aa": 1, "b": 2}).hex() == "a2" + "616202" + "62616101"
    # Integer keys: 10 (0x0a) before 100 (0x1864) before -1 (0x20).
    assert cbor.encode({-1: 0, 100: 0, 10: 0}).hex() == "a3" + "0a00" + "186400" + "2000"


def test_bool_is_not_an_integer() -> None:
    assert cbor.encode(True) != cbor.encode(1)


@pytest.mark.parametrize("bad", [2**64, -(2**64) - 1, object(), {1, 2}, "\ud800"])
def test_unencodable_values_are_invalid_argument(bad: object) -> None:
    with pytest.raises(InvalidArgumentError):
        cbor.encode(bad)


@PROPERTY
@given(st.dictionaries(st.text(max_size=6) | st.integers(-1000, 1000), st.integers(-(2**64), 2**64 - 1), max_size=8))
def test_map_encoding_ignores_insertion_order(mapping: dict[object, int]) -> None:
    reordered = dict(reversed(list(mapping.items())))
    assert cbor.encode(mapping) == cbor.encode(reordered)


@PROPERTY
@given(st.floats())
def test_preferred_floats_round_trip_exactly(value: float) -> None:
    import struct

    encoded = cbor.encode(value)
    widths = {0xF9: ">e", 0xFA: ">f", 0xFB: ">d"}
    decoded = struct.unpack(widths[encoded[0]], encoded[1:])[0]
    assert decoded == value or (decoded != decoded and value != value)

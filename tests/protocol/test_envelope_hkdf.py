"""HKDF-SHA256 comes from the `cryptography` package and its bytes equal RFC 5869 and the old derivation."""

from __future__ import annotations

import hmac

import pytest
from hypothesis import given
from hypothesis import strategies as st
from protocol_strategies import PROPERTY

from watchtower.protocol.confidential import envelope
from watchtower.protocol.confidential.envelope import hkdf_expand, hkdf_extract, hkdf_sha256
from watchtower.protocol.errors import InvalidArgumentError

# RFC 5869 Appendix A, the three SHA-256 cases: (ikm, salt, info, L, prk, okm).
RFC5869_SHA256 = [
    (
        "0b" * 22,
        "000102030405060708090a0b0c",
        "f0f1f2f3f4f5f6f7f8f9",
        42,
        "077709362c2e32df0ddc3f0dc47bba6390b6c73bb50f9c3122ec844ad7c2b3e5",
        "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865",
    ),
    (
        bytes(range(0x00, 0x50)).hex(),
        bytes(range(0x60, 0xB0)).hex(),
        bytes(range(0xB0, 0x100)).hex(),
        82,
        "06a6b88c5853361a06104c9ceb35b45cef760014904671014a193f40c15fc244",
        "b11e398dc80327a1c8e7f78c596a49344f012eda2d4efad8a050cc4c19afa97c"
        "59045a99cac7827271cb41c65e590e09da3275600c2f09b8367793a9aca3db71"
        "cc30c58179ec3e87c14c01d5c1f3434f1d87",
    ),
    (
        "0b" * 22,
        "",
        "",
        42,
        "19ef24a32c717b167f33a91d6f648bdf96596776afdb6377ac434c1c293ccb04",
        "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8",
    ),
]


@pytest.mark.parametrize(("ikm", "salt", "info", "length", "prk", "okm"), RFC5869_SHA256, ids=["A.1", "A.2", "A.3"])
def test_hkdf_equals_rfc5869_sha256_vectors(ikm: str, salt: str, info: str, length: int, prk: str, okm: str) -> None:
    ikm_b, salt_b, info_b = bytes.fromhex(ikm), bytes.fromhex(salt), bytes.fromhex(info)
    assert hkdf_extract(salt_b, ikm_b).hex() == prk
    assert hkdf_expand(bytes.fromhex(prk), info_b, length).hex() == okm
    assert hkdf_sha256(ikm=ikm_b, salt=salt_b, info=info_b, length=length).hex() == okm


def _reference_expand(prk: bytes, info: bytes, length: int) -> bytes:
    """The hand-written RFC 5869 §2.3 loop the envelope used before; kept here only as the oracle."""
    out, block, counter = b"", b"", 1
    while len(out) < length:
        block = hmac.digest(prk, block + info + bytes((counter,)), "sha256")
        out += block
        counter += 1
    return out[:length]


@PROPERTY
@given(
    ikm=st.binary(min_size=1, max_size=80),
    salt=st.binary(max_size=80),
    info=st.binary(max_size=80),
    length=st.integers(1, 255 * 32),
)
def test_hkdf_bytes_unchanged_from_the_hand_written_derivation(
    ikm: bytes, salt: bytes, info: bytes, length: int
) -> None:
    prk = hmac.digest(salt or bytes(32), ikm, "sha256")
    assert hkdf_extract(salt, ikm) == prk
    assert hkdf_expand(prk, info, length) == _reference_expand(prk, info, length)
    assert hkdf_sha256(ikm=ikm, salt=salt, info=info, length=length) == _reference_expand(prk, info, length)


def test_hkdf_is_the_cryptography_packages() -> None:
    # The derivation must not be a local re-implementation: the module names cryptography's KDFs.
    assert envelope.HKDF.__module__.startswith("cryptography.")
    assert envelope.HKDFExpand.__module__.startswith("cryptography.")
    assert not hasattr(envelope, "hmac")


@pytest.mark.parametrize("length", [0, 255 * 32 + 1])
def test_hkdf_refuses_an_out_of_range_length(length: int) -> None:
    with pytest.raises(InvalidArgumentError):
        hkdf_expand(b"k" * 32, b"", length)
    with pytest.raises(InvalidArgumentError):
        hkdf_sha256(ikm=b"k", salt=b"", info=b"", length=length)

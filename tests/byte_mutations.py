"""One hypothesis strategy for "a valid record, slightly broken", shared by the codec and fuzz tests."""

from __future__ import annotations

from hypothesis import strategies as st


@st.composite
def mutated_bytes(draw: st.DrawFn, valid: bytes) -> bytes:
    """`valid` with one to four bytes flipped, the tail cut, a few bytes inserted or one dropped."""
    data = bytearray(valid)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "drop"]))
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip" and data:
            data[at] ^= draw(st.integers(1, 255))
        elif op == "cut":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif data:
            del data[at]
    return bytes(data)

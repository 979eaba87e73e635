"""A push checkpoint is bounded by the block clock: one from far beyond it is refused on restore."""

from __future__ import annotations

from watchtower.protocol.push.checkpoint import FUTURE_BLOCK_TOLERANCE, PushCheckpoint, checkpoint_block_refusal


def at(block: int) -> PushCheckpoint:
    return PushCheckpoint("s1", low_watermark=1, ahead={}, pointer=None, block=block, used_deliveries=100,
                          used_cycles=0, resume_offset=None, dropped=0)


def test_a_checkpoint_up_to_the_clock_plus_the_skew_tolerance_is_trusted() -> None:
    assert checkpoint_block_refusal(at(1_000), 1_000) is None
    assert checkpoint_block_refusal(at(10), 1_000) is None  # a clock that went back is the schedule's business
    assert checkpoint_block_refusal(at(1_000 + FUTURE_BLOCK_TOLERANCE), 1_000) is None


def test_a_checkpoint_beyond_the_tolerance_is_refused_with_its_block_and_the_clock() -> None:
    reason = checkpoint_block_refusal(at(1_000 + FUTURE_BLOCK_TOLERANCE + 1), 1_000)
    assert reason is not None
    assert "beyond the current block 1000" in reason
    assert checkpoint_block_refusal(at(2**62), 1_000) is not None

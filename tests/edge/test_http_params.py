"""The HTTP API's one parameter parser: bounds, spec codes, and get_since's limit checked first."""

from __future__ import annotations

import math

import pytest

from watchtower.http import params
from watchtower.protocol.errors import InvalidArgumentError, InvalidFilterError, LimitExceededError


@pytest.mark.parametrize("text", ["9223372036854775808", str(10**21), str(10**400), "-1", "abc", "+5", "5_000",
                                  " 5", "٥", "", "1e3", "-0", "-00", "-01", "\u00a05", "5 "])
def test_integers_beyond_int64_or_not_plain_digits_are_invalid_argument(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"must be an integer in 0\.\.9223372036854775807"):
        params.int_text(text, "sequence")


def test_sequence_and_cursor_share_the_same_bounds() -> None:
    assert params.int_text("9223372036854775807", "sequence") == 2**63 - 1
    assert params.int_param({"cursor": "9223372036854775807"}, "cursor", 0) == 2**63 - 1
    with pytest.raises(InvalidArgumentError):
        params.int_param({"cursor": "9223372036854775808"}, "cursor", 0)


@pytest.mark.parametrize("limit", ["0", "501", "-3", "abc", str(10**400)])
def test_a_limit_outside_1_to_500_is_limit_exceeded(limit: str) -> None:
    with pytest.raises(LimitExceededError, match=r"1\.\.500"):
        params.limit_param({"limit": limit})
    assert params.limit_param({}) == 100


@pytest.mark.parametrize("wait", ["30001", str(10**21), str(10**400), "-1", "1.5"])
def test_long_poll_waits_are_capped_at_30_seconds(wait: str) -> None:
    with pytest.raises(InvalidArgumentError, match="wait_ms"):
        params.wait_ms_param({"wait_ms": wait})
    assert params.wait_ms_param({"wait_ms": "30000"}) == params.MAX_WAIT_MS == 30_000


@pytest.mark.parametrize("timeout", [0, -1, 0.0, 120.5, 10**400, math.inf, math.nan, "30", None, True, [1]])
def test_a_command_timeout_outside_0_to_120_seconds_is_invalid_argument(timeout: object) -> None:
    with pytest.raises(InvalidArgumentError, match="timeout_s"):
        params.timeout_param({"timeout_s": timeout})
    assert params.timeout_param({}) == 30.0
    assert params.timeout_param({"timeout_s": 120}) == 120.0


def test_a_filter_nested_beyond_recursion_or_too_long_is_invalid_filter() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(InvalidFilterError):
        params.filter_param({"filter": deep})
    nested = '{"not":' * 1_001 + '{"field":"kind","op":"eq","value":"x"}' + "}" * 1_001
    assert len(nested) < params.MAX_FILTER_CHARS
    with pytest.raises(InvalidFilterError):
        params.filter_param({"filter": nested})
    with pytest.raises(InvalidFilterError):
        params.filter_param({"filter": "{not json"})


def test_booleans_are_exactly_true_or_false() -> None:
    assert params.bool_param({"proof": "true"}, "proof") is True
    assert params.bool_param({"proof": "false"}, "proof") is False
    assert params.bool_param({}, "proof") is False


@pytest.mark.parametrize("text", ["yes", "1", "TRUE", "True", "no", "0", "FALSE", "", " true", "maybe"])
def test_a_boolean_other_than_true_or_false_is_invalid_argument_saying_what_is_accepted(text: str) -> None:
    """Failed before the fix for yes, 1, TRUE, True, no, 0, FALSE and empty (read as true or false)."""
    with pytest.raises(InvalidArgumentError, match="proof must be true or false") as info:
        params.bool_param({"proof": text}, "proof")
    assert info.value.code == "INVALID_ARGUMENT"


def test_an_empty_limit_is_limit_exceeded_saying_what_is_accepted() -> None:
    """Failed before the fix: ``limit=`` read as the default 100. The spec refuses an invalid get_since
    limit with LIMIT_EXCEEDED, whatever it is (``limit=abc`` already was)."""
    with pytest.raises(LimitExceededError, match=r"limit must be an integer in 1\.\.500, got ''"):
        params.limit_param({"limit": ""})


@pytest.mark.parametrize("name", ["cursor", "min_head", "from"])
def test_any_other_empty_integer_parameter_is_invalid_argument(name: str) -> None:
    with pytest.raises(InvalidArgumentError, match=f"{name} must be an integer in 0\\.\\.9223372036854775807, got ''"):
        params.int_param({name: ""}, name, 0)


@pytest.mark.parametrize("number", ["1" * 5_000, "-" + "9" * 5_000, "1" * 41])
def test_a_filter_with_a_huge_integer_is_invalid_filter(number: str) -> None:
    """Failed before the fix for 5,000 digits: Python's int-digits limit raised ValueError (a 500)."""
    text = '{"field":"sequence","op":"gte","value":' + number + "}"
    with pytest.raises(InvalidFilterError, match=r"integer of \d+ digits; integers here have at most 40"):
        params.filter_param({"filter": text})


def test_a_filter_integer_of_40_digits_still_reaches_the_filter_rules() -> None:
    text = '{"field":"sequence","op":"gte","value":' + "9" * 40 + "}"
    assert params.filter_param({"filter": text}) == {"field": "sequence", "op": "gte", "value": 10**40 - 1}


@pytest.mark.parametrize("body", [b'{"command": {"nonce": ' + b"7" * 5_000 + b"}}", b'{"n": [' + b"1" * 100 + b"]}"])
def test_a_request_body_with_a_huge_integer_is_invalid_argument_naming_the_bound(body: bytes) -> None:
    with pytest.raises(InvalidArgumentError, match="the request body holds an integer of"):
        params.json_text(body, what="the request body", usage="send {}")


@pytest.mark.parametrize("body", [b"{not json", b"\xff\xfe", b"[" * 100_000 + b"]" * 100_000])
def test_a_request_body_that_is_not_json_is_invalid_argument(body: bytes) -> None:
    with pytest.raises(InvalidArgumentError, match=r"the request body (is not JSON|nests too deep); send"):
        params.json_text(body, what="the request body", usage="send {}")

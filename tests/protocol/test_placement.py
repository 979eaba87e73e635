"""Where a record belongs (protocol.placement): misplaced commands, forwards and events are named."""

from __future__ import annotations

import pytest

from watchtower.protocol.errors import MalformedRecordError, UnauthorizedError
from watchtower.protocol.partitioning import partition_for_key
from watchtower.protocol.placement import (
    check_command_placement,
    check_instance_placement,
    instance_misplacement,
    misplacement,
)

PARTITIONS = 4


def elsewhere(key: str) -> int:
    return (partition_for_key(key.encode(), PARTITIONS) + 1) % PARTITIONS


def home(key: str) -> int:
    return partition_for_key(key.encode(), PARTITIONS)


def test_a_record_on_its_keys_partition_is_in_place() -> None:
    assert misplacement(b"s1", home("s1"), PARTITIONS) is None
    check_command_placement(b"s1", home("s1"), PARTITIONS)


@pytest.mark.parametrize("key", [None, b""])
def test_an_unkeyed_record_belongs_nowhere(key: bytes | None) -> None:
    assert "no key" in (misplacement(key, 0, PARTITIONS) or "")
    with pytest.raises(MalformedRecordError) as err:
        check_command_placement(key, 0, PARTITIONS)
    assert err.value.details == {"partition": 0, "home_partition": None}


def test_a_command_on_another_partition_is_malformed_record_naming_both() -> None:
    with pytest.raises(MalformedRecordError) as err:
        check_command_placement(b"s1", elsewhere("s1"), PARTITIONS)
    assert err.value.details == {"partition": elsewhere("s1"), "home_partition": home("s1")}
    assert f"belong on partition {home('s1')}, not {elsewhere('s1')}" in err.value.message


def test_an_instance_other_than_the_key_must_share_its_partition() -> None:
    key = "account:0xaa"
    same = next(f"account:0x{i:02x}" for i in range(256) if home(f"account:0x{i:02x}") == home(key)
                and f"account:0x{i:02x}" != key)
    other = next(f"account:0x{i:02x}" for i in range(256) if home(f"account:0x{i:02x}") != home(key))
    assert instance_misplacement(key, key.encode(), home(key), PARTITIONS) is None
    assert instance_misplacement(same, key.encode(), home(key), PARTITIONS) is None
    assert instance_misplacement(other, key.encode(), home(key), PARTITIONS) is not None
    with pytest.raises(UnauthorizedError):
        check_instance_placement(other, key.encode(), home(key), PARTITIONS, internal=False)
    with pytest.raises(MalformedRecordError):
        check_instance_placement(other, key.encode(), home(key), PARTITIONS, internal=True)

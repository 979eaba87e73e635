"""Where a record belongs: every keyed topic is partitioned by its key with Kafka's murmur2.

Each worker is the single writer of the partitions it owns, and an aggregate instance's state lives
on exactly one of them: the partition its id hashes to (:func:`partition_for_key`, the partitioner
of every Watchtower producer). A record found on another partition was not written by a
Watchtower client or worker: whoever can reach the broker can produce any key to any partition.
Deciding it would apply a command to state this partition does not hold and write the resulting
events where no fold expects them; folding it would mix another instance's history into this one.

The rules, shared by every consumer (the stream-actor worker for ``commands`` and ``internal``, the
folds of ``events``, ``messages``, ``delivery.state`` and ``replay``):

1. a record is keyed, and its key hashes to the partition it arrived on (:func:`misplacement`);
2. the aggregate instance a command or event acts on is the record's key, or at least hashes to
   the same partition (:func:`instance_misplacement`).

A command that breaks rule 1 is refused with ``MALFORMED_RECORD`` (:func:`check_command_placement`):
its signed body may be perfectly valid, as in a replayed ``create_stream`` taken from the key
history, but the record around it is not one a Watchtower client produces (those key every command
by its envelope's ``stream_id``, so it lands where its stream lives). ``INVALID_ARGUMENT`` would
point the caller at a field of the command, and there is none to fix; ``UNAUTHORIZED`` would say the
signer lacks a right, which it may well have. The client's remedy is to send the same command
through the SDK, the CLI or the HTTP API, which place it correctly.

A command that passes rule 1 but acts on an instance of another partition (an account command
whose envelope names another account than its signer's) is ``UNAUTHORIZED``, the answer the
account rules give the same command when both instances share a partition. A forward on
``internal`` (written by workers only) that does so is ``MALFORMED_RECORD``.

Pure: no I/O.
"""

from __future__ import annotations

from watchtower.protocol.errors import MalformedRecordError, UnauthorizedError
from watchtower.protocol.partitioning import partition_for_key

__all__ = ["check_command_placement", "check_instance_placement", "instance_misplacement", "misplacement",
           "partition_for_key"]


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def misplacement(key: bytes | None, partition: int, partitions: int) -> str | None:
    """Why a record keyed `key` does not belong on `partition` of a topic with `partitions` (None: it does)."""
    if not key:
        return f"the record has no key, so it belongs on no partition (it arrived on {partition})"
    home = partition_for_key(key, partitions)
    if home != partition:
        return f"records keyed {_show(key)} belong on partition {home}, not {partition}"
    return None


def instance_misplacement(instance: str, key: bytes | None, partition: int, partitions: int) -> str | None:
    """Why an instance `instance` acted on by a record keyed `key` on `partition` is not held there
    (None: it is, i.e. the instance is the key or shares its partition)."""
    if key is not None and key == instance.encode():
        return None
    home = partition_for_key(instance.encode(), partitions)
    if home != partition:
        return (f"the record keyed {_show(key)} acts on {_show(instance)}, which lives on partition {home}, "
                f"not {partition}")
    return None


def check_command_placement(key: bytes | None, partition: int, partitions: int, *, topic: str = "commands") -> None:
    """Rule 1 for a command or forward record: MALFORMED_RECORD when it is on a partition its key
    does not hash to."""
    reason = misplacement(key, partition, partitions)
    if reason is None:
        return
    home = partition_for_key(key, partitions) if key else None
    raise MalformedRecordError(
        f"the record on {topic} partition {partition} is not where its key puts it: {reason}. It was not "
        "decided; send the command through the SDK, the CLI or the HTTP API, which key it by its stream_id",
        details={"partition": partition, "home_partition": home},
    )


def check_instance_placement(instance: str, key: bytes | None, partition: int, partitions: int, *,
                             internal: bool) -> None:
    """Rule 2 for a command or forward whose record passed rule 1: UNAUTHORIZED for a signed command
    acting on an instance its record does not address, MALFORMED_RECORD for such a forward."""
    reason = instance_misplacement(instance, key, partition, partitions)
    if reason is None:
        return
    if internal:
        raise MalformedRecordError(f"a forward that is not where its instance lives: {reason}")
    raise UnauthorizedError(
        f"the command acts on {_show(instance)} but is addressed to {_show(key)}: a command may act only on "
        "the instance its envelope's stream_id names (for an account command: the signer's own account)",
    )

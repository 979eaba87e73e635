"""A runner's reader of ``ingest.tasks``: the static member of the runner's own consumer group, which
outlives the errors that kill a librdkafka consumer (`topics.group_reader`).

The runner's group has one member, and it is static (``group.instance.id``): a runner restarted
after kill -9 takes its partitions back at once instead of waiting out its dead self's session, and
a second process with the same key fences the first (one process per runner identity).

When a broker outage fences that member, the reader joins again with a new consumer: a runner that
only logged the fatal error would look alive and run nothing. A reader fenced again soon after
rejoining is most likely sharing its runner key with another process: the two take turns slowly
instead of fencing each other in a loop.
"""

from __future__ import annotations

from typing import Final

from watchtower.topics.group_reader import GroupReader

#: The runner's one member of its group (static membership: see the module docstring).
INSTANCE_ID: Final = "runner"


def task_reader(bootstrap: str, topic: str, group: str) -> GroupReader:
    """The static member of `group` reading `topic` from its earliest record, read_committed, its
    offsets committed by the client as it goes (a task read again after a restart yields a result
    the aggregator has counted already)."""
    return GroupReader(bootstrap, [topic], group=group, auto_commit=True, instance_id=INSTANCE_ID)

"""The consumer groups (and so the transactional ids) of one deployment's Kafka workers, named once.

Every group and transactional id of Watchtower's own processes starts with ``wt-``: that is what a
secure broker's ACLs grant the service principal (`local.security`). The prefix is resolved as for
every topic (None: ``$WATCHTOWER_TOPIC_PREFIX`` or ``wt``), so deployments sharing a cluster never
rebalance each other.
"""

from __future__ import annotations

from typing import Final

from watchtower.topics.catalogue import topic_name

STREAM_WORKER_GROUP: Final = "wt-stream-actor"


def stream_worker_group(prefix: str | None = None) -> str:
    """The stream workers' group: ``wt-stream-actor.<prefix>``."""
    return f"{STREAM_WORKER_GROUP}.{topic_name('commands', prefix).rsplit('.', 1)[0]}"


def worker_group(kind: str, prefix: str | None = None) -> str:
    """The group of one deployment's side workers of `kind` (``delivery``, ``replay``):
    ``wt-<prefix>.<kind>-worker``."""
    return f"wt-{topic_name('events', prefix).rsplit('.', 1)[0]}.{kind}-worker"


def projection_fold_group(prefix: str | None = None) -> str:
    """Where the projections record how far their folds got, for lag only: ``wt-<prefix>.projection-fold``.

    Nothing consumes through this group (the projections fold with readers of their own and
    restart from their tables); each commits its owned partitions' fold positions to it now and
    then, so the lag of a projection that stopped keeps growing where any process can read it."""
    return f"wt-{topic_name('events', prefix).rsplit('.', 1)[0]}.projection-fold"

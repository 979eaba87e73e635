"""Moved to `watchtower.gateway.archive`; this name stays for one release.

Reading the messages topic needs Kafka, so it is not part of the SDK.
"""

from watchtower.gateway.archive import read_committed_messages

__all__ = ["read_committed_messages"]

"""Moved to `watchtower.gateway.transport`; this name stays for one release.

The Kafka command transport is not part of the SDK (the SDK speaks HTTP and imports only
``protocol/`` and ``schemas/``): it is the command gateway's, and tools that talk to Kafka directly.
"""

from watchtower.gateway.transport import CommandClient

__all__ = ["CommandClient"]

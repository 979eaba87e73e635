"""Kafka's default key partitioner (murmur2), so Python code can name a key's partition itself.

Pure (no I/O): the placement rules of :mod:`watchtower.protocol.placement` are built on it, and
:mod:`watchtower.topics.partitioning` re-exports it for the Kafka-facing code.

Every producer that feeds Watchtower uses it: the Java clients and Faust by default, and
confluent-kafka with ``partitioner=murmur2_random``. A worker that forwards a record to another
aggregate (the registry) must pick the same partition those clients would.
"""

from __future__ import annotations

from functools import lru_cache

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 of `data` (as an unsigned int), bit for bit `Utils.murmur2`."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    rounded = length & ~3
    for i in range(0, rounded, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = (h * _M) & _MASK
        h ^= k
    rest = length & 3
    if rest == 3:
        h ^= data[rounded + 2] << 16
    if rest >= 2:
        h ^= data[rounded + 1] << 8
    if rest >= 1:
        h ^= data[rounded]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h


#: Distinct keys remembered by `partition_for_key`. A worker or a projection hashes the same few
#: stream ids for every record (placement checks, forwards); murmur2 in Python costs microseconds
#: per key, a lookup a fraction of that. Bounded, so hostile keys only evict; and only keys up to
#: `CACHED_KEY_BYTES` are kept (a stream id is far shorter), so a hostile writer's megabyte keys cost
#: no memory here.
KEY_CACHE_SIZE = 1 << 16
CACHED_KEY_BYTES = 256


@lru_cache(maxsize=KEY_CACHE_SIZE)
def _partition(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives `key` among `partitions`."""
    if partitions < 1:
        raise ValueError("a topic has at least one partition")
    raw = bytes(key)
    if len(raw) > CACHED_KEY_BYTES:
        return (murmur2(raw) & 0x7FFFFFFF) % partitions
    return _partition(raw, partitions)

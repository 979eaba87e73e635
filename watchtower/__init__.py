"""Watchtower: CIP-7 signed, ordered, filterable feeds, event-sourced on Apache Kafka."""

__version__ = "0.1.0"

"""CIP-7 ingestion at the edge: the scheduler (a Faust agent on the block clock), the runners and
the aggregator that publishes through the stream actor (docs/ingestion.md)."""

"""The stream actor: its state and types, reads and views, key schedule and key chains,
messages, filters, ring window and snapshots."""

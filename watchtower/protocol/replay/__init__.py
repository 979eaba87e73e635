"""Replay rules (ICRC-77): ranges and headers, registration, pricing and cancellation,
the replay fold and its status records."""

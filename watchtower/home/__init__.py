"""The per-user Watchtower home and the key material in it, shared by the SDK, ingestion, the key
manager and the metrics tools, and owned by none of them.

- `paths`: where the home is (``$WATCHTOWER_HOME``, default ``~/.watchtower``);
- `seeds`: ed25519 seed files (64 hex digits, 0600 in a 0700 directory) and their errors;
- `kek`: a key-encryption key (KEK) read from a 0600 file, and the AES-256-GCM wrap it seals secrets with.

It imports nothing of Watchtower but the protocol core, so a server uses it without the SDK.
"""

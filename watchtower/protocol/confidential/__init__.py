"""Confidential feeds: the XChaCha20-Poly1305 envelope, keyloads and their audience, the writer's
rules and ciphertext receipts."""

"""Every CIP-7 protocol constant, plus the few project constants the wire format forces on us.

CIP-7 constants keep the names the spec gives them ("Protocol Constants"). Project constants that
are not in CIP-7 say so in their comment; change them only together with DESIGN.md.
"""

from __future__ import annotations

from typing import Final

# --- CIP-7 "Protocol Constants" ---------------------------------------------------------------
MAX_INLINE_PAYLOAD_BYTES: Final = 16_384
DEFAULT_RING_BUFFER_CAPACITY: Final = 10_000
MAX_GET_SINCE_LIMIT: Final = 500
DEFAULT_MAX_SUBSCRIBERS: Final = 10_000
DEFAULT_INGEST_INTERVAL_BLOCKS: Final = 1
DEFAULT_KEY_EPOCH_BLOCKS: Final = 600
BILLING_ASSET: Final = "CBY"
MAX_PROTOCOL_FEE_BPS: Final = 5_000
CONTENT_CIPHER: Final = "XCHACHA20_POLY1305"
NONCE_BYTES: Final = 24
TAG_BYTES: Final = 16
MAX_EFFECTIVE_PLAINTEXT_BYTES: Final = MAX_INLINE_PAYLOAD_BYTES - NONCE_BYTES - TAG_BYTES  # 16_344
DEFAULT_MIN_PURCHASE_EPOCHS: Final = 1
MAX_ACCOUNT_KEYS_PER_ACCOUNT: Final = 8
MAX_ACTOR_AUTHORIZATIONS_PER_STREAM: Final = 64

# --- Other fixed CIP-7 values -------------------------------------------------------------------
STREAM_MESSAGE_VERSION: Final = 1
DEFAULT_CONTENT_TYPE: Final = "application/json"
MIN_GET_SINCE_LIMIT: Final = 1
BPS_DENOMINATOR: Final = 10_000
KEY_SCOPE_ACCOUNT: Final = "ACCOUNT"
ACCOUNT_KEY_SCHEME_X25519: Final = "X25519"
MAX_MEMO: Final = 256
"""The longest memo a CBY transfer carries, in characters."""
AUTHORIZATION_SCOPE_STREAM_DECRYPT: Final = "STREAM_DECRYPT"
STREAM_KEY_MANAGER_SEED: Final = 0x0000000000000006
FIRST_SIGNING_KEY_ID: Final = 1
FIRST_SEQUENCE: Final = 1

# --- Key and digest sizes (ed25519, SHA-256, X25519) ---------------------------------------------
ED25519_PUBLIC_KEY_BYTES: Final = 32
ED25519_SEED_BYTES: Final = 32
ED25519_SIGNATURE_BYTES: Final = 64
PAYLOAD_HASH_BYTES: Final = 32
X25519_PUBLIC_KEY_BYTES: Final = 32
CONTENT_KEY_BYTES: Final = 32
# Smallest legal CIPHERTEXT payload: the nonce plus the tag of an empty plaintext.
MIN_CIPHERTEXT_ENVELOPE_BYTES: Final = NONCE_BYTES + TAG_BYTES

# --- Filter DSL bounds (CIP-7 "Determinism constraints", DESIGN §7.4) ----------------------------
MAX_FILTER_DEPTH: Final = 4
MAX_FILTER_PREDICATES: Final = 16

# --- Epoch keys (DESIGN §7.7) --------------------------------------------------------------------
EPOCH_KEY_HKDF_SALT: Final = b"watchtower-cip7-epoch-key-v1"
# Project rule: a master seed shorter than this is refused, because HKDF cannot add entropy.
MIN_MASTER_SEED_BYTES: Final = 32

# --- Time (DESIGN §5) ----------------------------------------------------------------------------
GENESIS_UNIX_MS: Final = 1_767_225_600_000  # 2026-01-01T00:00:00Z
BLOCK_INTERVAL_MS: Final = 1_000

# --- Command nonces (project rule, docs/nonces.md) ---------------------------------------------------
# A nonce may be any strictly increasing integer; the SDK uses microseconds since the Unix epoch.
# A nonce more than this far ahead of the block clock (read as microseconds) is refused: one such
# nonce, once folded, would lock its caller out of the stream for as long as its clock lags it.
NONCE_MAX_AHEAD_US: Final = 86_400 * 1_000_000  # one day

# --- Integer ranges ------------------------------------------------------------------------------
MAX_UINT8: Final = 2**8 - 1
MAX_UINT16: Final = 2**16 - 1
MAX_UINT32: Final = 2**32 - 1
MAX_UINT64: Final = 2**64 - 1
# Project rule: CIP-7 declares uint64 fields, but Avro, Kafka and Spark carry signed 64-bit longs.
# Every uint64 field (sequences, epochs, ids, CBY amounts) is therefore bounded by this value, so
# anything the protocol accepts can always be written to the log.
MAX_WIRE_UINT64: Final = 2**63 - 1
# The key manager's actor nonces count its encryptions (reserved in blocks, docs/keymgr.md): no
# deployment comes near 2**53 of them, so a reservation past this bound is not one it committed (a
# forged or corrupt ``keymgr.state`` record) and is quarantined; every nonce also stays exact in JSON.
MAX_ACTOR_NONCE: Final = 2**53 - 1

# --- Paging (project constants; CIP-7 leaves get_key_history's limit open) ------------------------
DEFAULT_KEY_HISTORY_LIMIT: Final = 100
MAX_KEY_HISTORY_LIMIT: Final = 500

# --- Push-delivery defaults (project constants; CIP-7 requires them finite and non-zero) ----------
DEFAULT_MAX_PUSH_DELIVERIES_PER_BLOCK: Final = 10_000
DEFAULT_MAX_PUSH_CYCLES_PER_BLOCK: Final = 100_000_000

# --- ICRC-77 replay headers (DESIGN §7.8): Kafka record header names -----------------------------
REPLAY_HEADER: Final = "icrc77:replay"
REPLAY_ID_HEADER: Final = "icrc77:replay:id"
REPLAY_END_ID_HEADER: Final = "icrc77:replay:end_id"

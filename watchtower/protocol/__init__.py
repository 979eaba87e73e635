"""The pure CIP-7 core: every protocol rule, in one place, with no I/O and no clock.

Agents, projections, replay, Spark jobs and the SDK all call these functions, so live
processing, rebuilds and bulk verification cannot drift apart. Nothing here imports Kafka,
Faust, HTTP or any other Watchtower package.

Modules, by family (the shared core at the top, each family a sub-package):
- `constants`, `enums`, `errors`, `validation`, `json_ints` — the spec's numbers, vocabularies,
  error codes and argument checks;
- `canonical_bytes`, `signing`, `cbor` — canonical signing bytes, ed25519; `signed_command`,
  `frozen_json`, `commands`, `command_auth`, `addresses` — identities and signed commands;
  `events`, `event_names` — event bodies and their type names;
- `config` — StreamConfig; `deployment`, `partitioning`, `placement`, `registry`;
- `conformance` — the DESIGN §7.9 vector checker;
- `stream/` — the stream actor: `actor` (decide, with `publish_rules` and `method_rules`),
  `message`, `key_schedule`, `key_chain`, `filter_ast`, `filters`, `ring_window`, its state,
  reads, views and snapshots;
- `ledger/` — the ledger and paid access: `paid`, `billing`, accounts, supply, paid streams;
- `confidential/` — `envelope` (epoch keys, the XChaCha20-Poly1305 envelope, sealed-box key
  delivery), keyloads and ciphertext receipts;
- `replay/` — ICRC-77 ranges and replay headers (`replay.rules`), registration and the fold;
- `ingestion/` — ingestion tasks, proofs, records, results and runners;
- `push/`, `page/` — push schedules; `get_since` page rules and proofs.
"""

from watchtower.protocol.addresses import (
    address_from_public_key,
    is_address,
    public_key_from_address,
    require_address,
)
from watchtower.protocol.canonical_bytes import message_signing_bytes, signing_bytes
from watchtower.protocol.command_auth import (
    caller_address,
    check_nonce,
    sign_command_bytes,
    verify_command_signature,
)
from watchtower.protocol.confidential.envelope import (
    decrypt_for_epoch,
    decrypt_with_content_key,
    derive_content_key,
    derive_nonce,
    encrypt_for_epoch,
    envelope_aad,
    open_payload,
    seal_payload,
    unwrap_epoch_key,
    validate_x25519_public_key,
    wrap_epoch_key,
)
from watchtower.protocol.config import IngestionConfig, StreamConfig
from watchtower.protocol.enums import (
    AccessMode,
    DeliveryMode,
    KeyStatus,
    PayloadFormat,
    ReplayState,
    SubscriptionPolicy,
    SubscriptionStatus,
    parse_access_mode,
)
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.ledger.billing import (
    EpochAccessDecision,
    KeyAccessReceipt,
    Price,
    acquire_epoch_access,
    block_height_at,
    first_height_of_epoch,
    key_epoch_at,
    key_epoch_of_height,
    price_epochs,
    require_entitlement,
)
from watchtower.protocol.ledger.paid import EpochPricing, PaidStreamConfig
from watchtower.protocol.replay.rules import (
    ReplayMarker,
    ReplayRange,
    plan_replay,
    read_replay_headers,
    replay_headers,
)
from watchtower.protocol.signed_command import Command, command_signing_bytes, sign_command, verify_command
from watchtower.protocol.signing import (
    public_key_of,
    sign_message,
    signing_key_from_seed,
    verify_message,
    verify_message_or_raise,
    verify_with_schedule,
    verify_with_schedule_or_raise,
)
from watchtower.protocol.stream.filter_ast import All, Any_, FilterNode, Not, Op, Predicate
from watchtower.protocol.stream.filters import compile_filter, evaluate, parse_filter, validate_filter
from watchtower.protocol.stream.key_schedule import (
    KeyHistoryPage,
    KeySchedule,
    KeyScheduleEntry,
    get_key_at_sequence,
    get_key_history,
)
from watchtower.protocol.stream.message import StreamMessage, TagValue, payload_hash_of
from watchtower.protocol.stream.ring_window import RingWindow, check_limit, floor_for, get_since_range

__all__ = [
    "AccessMode",
    "All",
    "Any_",
    "Command",
    "DeliveryMode",
    "EpochAccessDecision",
    "EpochPricing",
    "FilterNode",
    "IngestionConfig",
    "KeyAccessReceipt",
    "KeyHistoryPage",
    "KeySchedule",
    "KeyScheduleEntry",
    "KeyStatus",
    "Not",
    "Op",
    "PaidStreamConfig",
    "PayloadFormat",
    "Predicate",
    "Price",
    "ReplayMarker",
    "ReplayRange",
    "ReplayState",
    "RingWindow",
    "StreamConfig",
    "StreamMessage",
    "SubscriptionPolicy",
    "SubscriptionStatus",
    "TagValue",
    "WatchtowerError",
    "acquire_epoch_access",
    "address_from_public_key",
    "block_height_at",
    "caller_address",
    "check_limit",
    "check_nonce",
    "command_signing_bytes",
    "compile_filter",
    "decrypt_for_epoch",
    "decrypt_with_content_key",
    "derive_content_key",
    "derive_nonce",
    "encrypt_for_epoch",
    "envelope_aad",
    "evaluate",
    "first_height_of_epoch",
    "floor_for",
    "get_key_at_sequence",
    "get_key_history",
    "get_since_range",
    "is_address",
    "key_epoch_at",
    "key_epoch_of_height",
    "message_signing_bytes",
    "open_payload",
    "parse_access_mode",
    "parse_filter",
    "payload_hash_of",
    "plan_replay",
    "price_epochs",
    "public_key_from_address",
    "public_key_of",
    "read_replay_headers",
    "replay_headers",
    "require_address",
    "require_entitlement",
    "seal_payload",
    "sign_command",
    "sign_command_bytes",
    "sign_message",
    "signing_bytes",
    "signing_key_from_seed",
    "unwrap_epoch_key",
    "validate_filter",
    "validate_x25519_public_key",
    "verify_command",
    "verify_command_signature",
    "verify_message",
    "verify_message_or_raise",
    "verify_with_schedule",
    "verify_with_schedule_or_raise",
    "wrap_epoch_key",
]

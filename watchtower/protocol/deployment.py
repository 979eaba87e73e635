"""What a deployment fixes at genesis, never a command argument.

CIP-7: "protocol_treasury is set at genesis or via governance; publishers MAY NOT override it".
A `Deployment` carries such facts into `decide`; the edge builds it from the operator's
configuration (`watchtower.workers.deployment`), so no caller can choose them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Final

from watchtower.protocol.addresses import require_address
from watchtower.protocol.constants import ED25519_PUBLIC_KEY_BYTES
from watchtower.protocol.errors import InvalidArgumentError
from watchtower.protocol.validation import require_bytes

DEFAULT_REPLAY_MAX_RANGE: Final = 1_000_000


@dataclasses.dataclass(frozen=True, slots=True)
class Deployment:
    """Genesis configuration the aggregates apply.

    `protocol_treasury` None: no paid feeds. `cby_minter` None: nobody can mint CBY.
    `keymgr_public_key`: the key manager's ed25519 public key (32 bytes) that signs ciphertext
    receipts; None: no ciphertext publish can be accepted on a paid feed.
    `replay_max_range`: the widest ``[first, end)`` one replay request may cover.
    `runner_registrar`: the address that alone admits ingestion runners
    (`protocol.ingestion.runners`); None: runners register themselves (open registration).
    """

    protocol_treasury: str | None = None
    cby_minter: str | None = None
    keymgr_public_key: bytes | None = None
    replay_max_range: int = DEFAULT_REPLAY_MAX_RANGE
    """The most sequences one register_replay may cover (ICRC-77 RangeTooLarge above it)."""
    runner_registrar: str | None = None

    def __post_init__(self) -> None:
        if type(self.replay_max_range) is not int or self.replay_max_range < 1:
            raise InvalidArgumentError(f"replay_max_range must be a positive integer, got {self.replay_max_range!r}")
        if self.protocol_treasury is not None:
            require_address(self.protocol_treasury, "protocol_treasury")
        if self.cby_minter is not None:
            require_address(self.cby_minter, "cby_minter")
        if self.runner_registrar is not None:
            require_address(self.runner_registrar, "runner_registrar")
        if self.keymgr_public_key is not None:
            require_bytes(self.keymgr_public_key, "keymgr_public_key", length=ED25519_PUBLIC_KEY_BYTES)

    def govern_paid_config(self, paid: Mapping[str, Any]) -> dict[str, Any]:
        """A creator's paid_stream_config with the deployment's protocol treasury filled in.

        The creator may omit protocol_treasury or repeat the deployment's own; any other value is
        INVALID_ARGUMENT, and so is a paid feed on a deployment that has no treasury.
        """
        if self.protocol_treasury is None:
            raise InvalidArgumentError(
                "this deployment has no protocol treasury, so it cannot host paid feeds; its operator sets "
                "WATCHTOWER_PROTOCOL_TREASURY for the stream workers"
            )
        given = paid.get("protocol_treasury")
        if given is not None and given != self.protocol_treasury:
            raise InvalidArgumentError(
                f"protocol_treasury is fixed by the deployment ({self.protocol_treasury}) and publishers may not "
                "override it (CIP-7); omit protocol_treasury from paid_stream_config",
                details={"protocol_treasury": self.protocol_treasury},
            )
        return {**paid, "protocol_treasury": self.protocol_treasury}


NO_TREASURY = Deployment()

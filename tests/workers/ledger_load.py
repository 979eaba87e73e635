"""A CBY ledger workload for the chaos test and the benchmark: signed keymgr commands sent to the
real workers over Kafka, each retried until it is answered.

Retries resend the SAME signed command (same nonce, same signature): the workers answer a repeat
with the original reply (``"duplicate": true``) and change nothing, so a retry after a timeout can
never charge twice. A caller keeps one command in flight per account, because an instance
remembers only its caller's last nonce: a retry of an older command after a newer one was decided
would be refused with NONCE_REPLAYED.

Bodies and envelope keys are those of the shared keymgr interface: ``acct:<address>`` for an
account's own commands, ``cby:supply`` for mints, ``paid:<stream_id>`` for purchases.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import CancelledError
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any

import nacl.signing
from waiting import wait_until

from watchtower.gateway.transport import CommandClient
from watchtower.protocol.addresses import address_from_public_key
from watchtower.protocol.errors import WatchtowerError
from watchtower.protocol.signed_command import Command, command_digest, sign_command

# Answers that say "not yet, ask again": the purchase saga is still settling, or the instance's
# partition is still being recovered after a rebalance.
RETRY_CODES = frozenset({"NOT_READY"})


@dataclass
class Account:
    """A key pair and a nonce counter (nonces only have to grow per instance; one counter does)."""

    key: nacl.signing.SigningKey = field(default_factory=nacl.signing.SigningKey.generate)
    nonce: int = 0

    @property
    def address(self) -> str:
        return address_from_public_key(bytes(self.key.verify_key))

    def sign(self, method: str, stream_id: str, body: dict[str, Any]) -> Command:
        self.nonce += 1
        return sign_command(self.key, method, stream_id, self.nonce, body)

    def mint(self, to: str, amount: int) -> Command:
        return self.sign("mint_cby", "cby:supply", {"to": to, "amount_cby": amount})

    def transfer(self, to: str, amount: int) -> Command:
        return self.sign("transfer_cby", f"acct:{self.address}", {"to": to, "amount_cby": amount})

    def burn(self, amount: int) -> Command:
        return self.sign("burn_cby", f"acct:{self.address}", {"amount_cby": amount})

    def acquire(self, stream_id: str, target_key_epoch: int, **extra: Any) -> Command:
        return self.sign("acquire_epoch_access", f"paid:{stream_id}",
                         {"stream_id": stream_id, "target_key_epoch": target_key_epoch, **extra})


@dataclass
class Answer:
    """The final answer to one command: its result, or the spec code of its refusal."""

    command: Command
    ok: bool
    result: dict[str, Any] | None
    code: str | None
    message: str
    sends: int  # 1 + the number of resends of the same signed command
    seconds: float  # first send to final answer

    @property
    def digest_hex(self) -> str:
        """Also the purchase_id of an acquire_epoch_access command."""
        return command_digest(self.command).hex()


@dataclass
class Sender:
    """Sends commands through one thread-safe CommandClient and counts what retries cost."""

    client: CommandClient
    attempt_timeout_s: float = 15.0
    give_up_s: float = 300.0
    resends: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, cmd: Command) -> Answer:
        """Send `cmd` (and the same `cmd` again after a timeout or a retry code) until answered."""
        start = time.monotonic()
        sends = 0

        def answered() -> Answer | None:
            nonlocal sends
            sends += 1
            if sends > 1:
                with self._lock:
                    self.resends += 1
            fut = self.client.submit(cmd)
            try:
                result = fut.result(self.attempt_timeout_s)
            except (FutureTimeout, CancelledError):
                fut.cancel()
                return None
            except WatchtowerError as err:
                if err.code in RETRY_CODES:
                    return None
                return Answer(cmd, False, None, err.code, err.message, sends, time.monotonic() - start)
            return Answer(cmd, True, dict(result), None, "", sends, time.monotonic() - start)

        return wait_until(lambda: f"an answer to {cmd.method} on {cmd.stream_id} ({sends} sends)", answered,
                          timeout_s=self.give_up_s, every_s=0.2)

    def ok(self, cmd: Command) -> dict[str, Any]:
        """The result of `cmd`; a refusal fails the caller with its code and message."""
        answer = self.send(cmd)
        assert answer.ok, f"{cmd.method} refused: {answer.code}: {answer.message}"
        assert answer.result is not None
        return answer.result


def paid_stream_body(owner: Account, publisher: nacl.signing.SigningKey, *, fee: int, bps: int,
                     key_epoch_blocks: int = 3600) -> dict[str, Any]:
    """A create_stream body for a PLATFORM_MANAGED stream whose publisher treasury is the owner."""
    return {"publisher_key_hex": bytes(publisher.verify_key).hex(), "access_mode": "SUBSCRIBER_PAID",
            "paid_stream_config": {"fee_per_key_epoch_cby": fee, "protocol_fee_bps": bps,
                                   "publisher_treasury": owner.address, "key_epoch_blocks": key_epoch_blocks,
                                   "min_purchase_epochs": 1}}

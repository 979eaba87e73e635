"""`FakeApi`: the SDK's API surface answered in memory by the pure stream aggregate (no server).

For applications' unit tests and examples: `Publisher`, `Subscriber` and `create_feed` accept it
wherever they take an `ApiClient`. It decides each command with `protocol.stream.actor.decide`,
folds the events with `evolve`, keeps the StreamMessages a publish appends (as the messages topic
does) and answers reads with the same fields, the same order of checks and the same spec error
codes as the HTTP API. tests/client/test_sdk_contract.py drives one scenario against this fake
and a real stack and requires equal answers, so the two cannot drift apart silently.

Account keys are modelled too: a signed ``register_account_key`` or ``revoke_account_key`` is
decided by the pure account rules (`account_commands.decide_account`) and `account_info` answers
``GET /v1/accounts/{address}``'s keys (balances and grants stay empty).

Not modelled: the feed registry (`feeds`, `feed`), long-poll waiting (nothing can change while
a single-threaded fake waits, so `min_head` answers at once) and time-outs. Error *messages* may
differ from the server's; error *codes* do not.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Final

from watchtower.protocol.constants import DEFAULT_KEY_HISTORY_LIMIT, FIRST_SIGNING_KEY_ID
from watchtower.protocol.errors import InvalidArgumentError, LimitExceededError, StreamNotFoundError
from watchtower.protocol.ledger.account_commands import decide_account
from watchtower.protocol.ledger.account_state import AccountState
from watchtower.protocol.ledger.accounts import evolve_account
from watchtower.protocol.ledger.billing import block_height_at
from watchtower.protocol.ledger.common import ACCOUNT_PREFIX, account_instance
from watchtower.protocol.page.proof import build_page_proof
from watchtower.protocol.signed_command import Command, Method
from watchtower.protocol.stream import actor as stream_actor
from watchtower.protocol.stream.filters import compile_filter, parse_filter
from watchtower.protocol.stream.key_chain import key_chain_from_json
from watchtower.protocol.stream.key_schedule import KeySchedule, KeyScheduleEntry
from watchtower.protocol.stream.message import StreamMessage
from watchtower.protocol.stream.ring_window import check_limit
from watchtower.protocol.stream.state import STREAM_CREATED, StreamState, evolve

#: The largest integer a query parameter takes (as the HTTP API: a signed 64-bit integer).
MAX_QUERY_INT: Final = 2**63 - 1
MAX_KEY_PAGE: Final = 500
_KEY_METHODS: Final = frozenset({Method.REGISTER_ACCOUNT_KEY, Method.REVOKE_ACCOUNT_KEY})


class FakeApi:
    """In-memory stand-in for `watchtower.client.http.ApiClient` (one process, no I/O)."""

    def __init__(self) -> None:
        self.states: dict[str, StreamState] = {}
        #: The archive: every StreamMessage appended, by stream and sequence (as the messages topic).
        self.messages: dict[str, dict[int, StreamMessage]] = {}
        self.created_at_block: dict[str, int] = {}
        self.accounts: dict[str, AccountState] = {}

    # ------------------------------------------------------------------ commands
    def command(self, cmd: Command, *, timeout_s: float = 30.0) -> dict[str, Any]:  # noqa: ARG002 (ApiClient's)
        """Decide and apply `cmd`; the committed result, or the spec error raised."""
        height = block_height_at(int(time.time() * 1000))
        if cmd.stream_id.startswith(ACCOUNT_PREFIX):
            return self._account_command(cmd, height)
        state = self.states.get(cmd.stream_id) or StreamState.initial(cmd.stream_id)
        decision = stream_actor.decide(state, cmd, block_height=height)
        for event in decision.events:
            state = evolve(state, event)
            if event.type == STREAM_CREATED:
                self.created_at_block[cmd.stream_id] = event.block_height
        for message in decision.messages:
            self.messages.setdefault(cmd.stream_id, {})[message.sequence] = message
        self.states[cmd.stream_id] = state
        return dict(decision.reply)

    def _account_command(self, cmd: Command, height: int) -> dict[str, Any]:
        if cmd.method not in _KEY_METHODS:
            raise InvalidArgumentError(f"FakeApi models account keys only, not {cmd.method}; use a real stack")
        account = self.accounts.get(cmd.stream_id) or AccountState.initial(cmd.stream_id)
        decision = decide_account(account, cmd, block_height=height)
        for event in decision.events:
            account = evolve_account(account, event)
        self.accounts[cmd.stream_id] = account
        return dict(decision.reply or {})

    # ------------------------------------------------------------------ reads
    def account_info(self, address: str) -> dict[str, Any]:
        """As ``GET /v1/accounts/{address}``: the account keys (an account never seen has none)."""
        state = self.accounts.get(account_instance(address))
        keys = [] if state is None else [
            {"account_key_id": k.account_key_id, "scheme": k.scheme, "public_key_hex": k.public_key.hex(),
             "status": k.status, "registered_at_block": k.registered_at_block, "revoked_at_block": k.revoked_at_block}
            for k in state.keys]
        return {"account": address, "balance_cby": 0, "keys": keys, "authorizations": []}

    def health(self) -> dict[str, Any]:
        return {"ok": True, "ready": True, "worker": "fake"}

    def _state(self, stream_id: str) -> StreamState:
        state = self.states.get(stream_id)
        if state is None or not state.created:
            raise StreamNotFoundError(f"stream {stream_id!r} does not exist; check the id with `watchtower list`")
        return state

    def get_head(self, stream_id: str) -> dict[str, Any]:
        return stream_actor.get_head(self._state(stream_id))

    def stream_info(self, stream_id: str) -> dict[str, Any]:
        state = self._state(stream_id)
        body = stream_actor.get_head(state)
        config = state.config
        assert config is not None  # a created stream has one
        body.update(config=config.to_json_dict(), allowlist=sorted(state.allowlist),
                    subscribers=len(state.subscriptions), created_at_block=self.created_at_block[stream_id],
                    key_epoch=state.last_key_epoch)
        return body

    def get_since(self, stream_id: str, cursor: int = 0, limit: int = 100, *, filter: Mapping[str, Any] | None = None,
                  min_head: int | None = None, wait_ms: int | None = None, proof: bool = False) -> dict[str, Any]:
        """As ``GET /v1/streams/{id}/messages``: limit first, then cursor, filter, stream, window;
        with `proof`, the page's completeness proof too (`page_proof.build_page_proof`)."""
        check_limit(limit)
        _bounded("cursor", cursor)
        _bounded("min_head", min_head)
        _bounded("wait_ms", wait_ms, maximum=30_000)
        node = parse_filter(filter)
        state = self._state(stream_id)
        wanted = stream_actor.get_since_range(state, cursor, limit)
        archive = self.messages.get(stream_id, {})
        answer: dict[str, Any] = {"stream_id": stream_id}
        if proof:
            answer["messages"], answer["proof"] = build_page_proof((archive[seq] for seq in wanted), filter)
        else:
            match = compile_filter(node)
            answer["messages"] = [archive[seq].to_json_dict() for seq in wanted if match(archive[seq].headers())]
        return {**answer, "head_sequence": state.head, "floor_sequence": state.floor,
                "head": state.head, "floor": state.floor,
                "next_cursor": wanted[-1] if len(wanted) else cursor}

    def key_at_sequence(self, stream_id: str, sequence: int) -> dict[str, Any]:
        _bounded("sequence", sequence, minimum=1)
        entry = stream_actor.key_at_sequence(self._state(stream_id), sequence)
        return {**entry.to_dict(), "publisher_key": entry.public_key.hex()}

    def key_history(self, stream_id: str, from_signing_key_id: int = FIRST_SIGNING_KEY_ID,
                    limit: int = DEFAULT_KEY_HISTORY_LIMIT) -> dict[str, Any]:
        _bounded("from", from_signing_key_id, minimum=1)
        _bounded("limit", limit, minimum=1, maximum=MAX_KEY_PAGE, error=LimitExceededError)
        page = stream_actor.key_history(self._state(stream_id), from_signing_key_id, limit)
        return {"entries": [{**e.to_dict(), "publisher_key": e.public_key.hex()} for e in page.entries],
                "next_from": page.next_from_signing_key_id}

    def key_schedule(self, stream_id: str) -> KeySchedule:
        # Through the JSON of `key_history`, as the HTTP client reads it: the key chain (each entry's
        # signed command) is served the same way, and `Subscriber` verifies it.
        entries: list[KeyScheduleEntry] = []
        start: int | None = FIRST_SIGNING_KEY_ID
        while start is not None:
            page = self.key_history(stream_id, start, MAX_KEY_PAGE)
            entries.extend(key_chain_from_json(page["entries"]))
            start = page["next_from"]
        return KeySchedule(tuple(entries))

    def subscribers(self, stream_id: str, *, active_only: bool = False) -> list[dict[str, Any]]:
        return [s.to_dict() for s in stream_actor.subscribers(self._state(stream_id), active_only=active_only)]


def _bounded(name: str, value: int | None, *, minimum: int = 0, maximum: int = MAX_QUERY_INT,
             error: type[InvalidArgumentError] | type[LimitExceededError] = InvalidArgumentError) -> None:
    """The HTTP API's integer-parameter rule (absent is fine; else an integer in range)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise error(f"{name} must be an integer in {minimum}..{maximum}, got {value!r}")

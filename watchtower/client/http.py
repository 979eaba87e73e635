"""`ApiClient`: the Watchtower HTTP API (docs/http-api.md) over the standard library.

Every method maps to one route and returns its JSON result as a dict (the SDK in `client.sdk`
turns them into protocol types). The transport under them (one JSON request, its errors, and
``POST /v1/commands``) is `watchtower.http.api_client.ApiTransport`, shared with the servers that
only submit commands. Failures are always a `WatchtowerError`:

- an error body ``{"error": {"code", "message"}}`` is raised as the matching subclass
  (`WatchtowerError.from_dict`), e.g. STALE_SEQUENCE or FEED_NOT_FOUND;
- nothing listening (connection refused, unknown host) is API_UNAVAILABLE, saying to start the
  stack with ``watchtower up``;
- no answer within the timeout is TIMEOUT;
- a reply that is not Watchtower JSON keeps its HTTP status as the code (``HTTP_502``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from watchtower.http.api_client import (
    DEFAULT_API_URL as DEFAULT_API_URL,
)
from watchtower.http.api_client import (
    DEFAULT_COMMAND_TIMEOUT_S as DEFAULT_COMMAND_TIMEOUT_S,
)
from watchtower.http.api_client import (
    DEFAULT_TIMEOUT_S as DEFAULT_TIMEOUT_S,
)
from watchtower.http.api_client import (
    ENV_API as ENV_API,
)
from watchtower.http.api_client import (
    ENV_COMMANDS_API as ENV_COMMANDS_API,
)
from watchtower.http.api_client import (
    ApiTransport as ApiTransport,
)
from watchtower.http.api_client import (
    ApiUnavailableError as ApiUnavailableError,
)
from watchtower.http.api_client import answer_field
from watchtower.http.api_client import (
    resolve_api_url as resolve_api_url,
)
from watchtower.protocol.constants import DEFAULT_KEY_HISTORY_LIMIT, FIRST_SIGNING_KEY_ID
from watchtower.protocol.errors import InvalidArgumentError, MalformedRecordError
from watchtower.protocol.json_ints import as_int
from watchtower.protocol.stream.key_chain import key_chain_from_json
from watchtower.protocol.stream.key_schedule import KeySchedule, KeyScheduleEntry


class ApiClient(ApiTransport):
    """Synchronous client of one Watchtower API. Holds no connection; safe to share between threads.

    `timeout` bounds every request in seconds (long polls and commands extend it by their own wait).
    Commands go to the command gateway as `ApiTransport` resolves it (`commands_url`, else
    ``$WATCHTOWER_COMMANDS_API``, else the one `watchtower up` recorded beside this API, else the API).
    """

    def __repr__(self) -> str:
        if self.commands_url != self.base_url:
            return f"ApiClient({self.base_url!r}, commands_url={self.commands_url!r})"
        return f"ApiClient({self.base_url!r})"

    # --- Queries ---------------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """GET /v1/health: ``{"ok": true, "worker": id}``."""
        return self.request("GET", "/v1/health")

    def openapi(self) -> dict[str, Any]:
        """GET /openapi.json: the machine-readable API description."""
        return self.request("GET", "/openapi.json")

    def stream_info(self, stream_id: str) -> dict[str, Any]:
        """GET /v1/streams/{id}: the head fields plus config, feed_id, allowlist and key_epoch."""
        return self.request("GET", f"/v1/streams/{self._seg(stream_id)}")

    def get_head(self, stream_id: str) -> dict[str, Any]:
        """GET /v1/streams/{id}/head: head, floor, capacity, current signing key, policy, counts."""
        return self.request("GET", f"/v1/streams/{self._seg(stream_id)}/head")

    def get_since(
        self,
        stream_id: str,
        cursor: int = 0,
        limit: int = 100,
        *,
        filter: Mapping[str, Any] | None = None,
        min_head: int | None = None,
        wait_ms: int | None = None,
        proof: bool = False,
    ) -> dict[str, Any]:
        """GET /v1/streams/{id}/messages: ``{"messages", "head", "floor", "next_cursor"}``.

        Messages are `StreamMessage.to_json_dict()` dicts, unverified. With `min_head` the server
        waits up to `wait_ms` for the stream to reach that head (a long poll), so the HTTP timeout
        is extended by `wait_ms`. With `proof` the answer also carries ``"proof"``, the
        completeness proof of a filtered page (`watchtower.protocol.page.proof`), unverified too.
        """
        query = {
            "cursor": cursor,
            "limit": limit,
            "filter": None if filter is None else json.dumps(filter, separators=(",", ":")),
            "proof": "true" if proof else None,
            "min_head": min_head,
            "wait_ms": wait_ms,
        }
        extra = (wait_ms if wait_ms is not None else 2000) / 1000 if min_head is not None else 0.0
        return self.request("GET", f"/v1/streams/{self._seg(stream_id)}/messages", query=query,
                            timeout=self.timeout + extra)

    def key_at_sequence(self, stream_id: str, sequence: int) -> dict[str, Any]:
        """GET /v1/streams/{id}/keys/at/{seq}: signing_key_id, public_key_hex, effective_sequence."""
        return self.request("GET", f"/v1/streams/{self._seg(stream_id)}/keys/at/{int(sequence)}")

    def key_history(
        self, stream_id: str, from_signing_key_id: int = FIRST_SIGNING_KEY_ID, limit: int = DEFAULT_KEY_HISTORY_LIMIT
    ) -> dict[str, Any]:
        """GET /v1/streams/{id}/keys: one page, ``{"entries": [...], "next_from": int or null}``."""
        query = {"from": from_signing_key_id, "limit": limit}
        return self.request("GET", f"/v1/streams/{self._seg(stream_id)}/keys", query=query)

    def key_schedule(self, stream_id: str) -> KeySchedule:
        """The stream's whole publisher key schedule with each entry's signed command (the key chain),
        following `key_history` pages to the end. Not verified here: `Subscriber.key_schedule`
        verifies the chain (`key_chain.verify_key_chain`) before trusting any key."""
        entries: list[KeyScheduleEntry] = []
        start: int | None = FIRST_SIGNING_KEY_ID
        while start is not None:
            page = self.key_history(stream_id, start, DEFAULT_KEY_HISTORY_LIMIT)
            raw = answer_field(page, "entries", list, "key history")
            entries.extend(key_chain_from_json(raw))
            following = as_int(page.get("next_from"))
            if following is not None and (not isinstance(following, int) or following <= start or not raw):
                raise MalformedRecordError(f"key history of {stream_id} pages backwards (next_from {following!r})")
            start = following
        try:
            return KeySchedule(tuple(entries))
        except InvalidArgumentError as exc:
            raise MalformedRecordError(f"the key history of {stream_id} is not a key schedule: {exc.message}") from None

    def subscribers(self, stream_id: str, *, active_only: bool = False) -> list[dict[str, Any]]:
        """GET /v1/streams/{id}/subscribers: Subscription dicts ordered by address."""
        query = {"active_only": "true" if active_only else None}
        page = self.request("GET", f"/v1/streams/{self._seg(stream_id)}/subscribers", query=query)
        return list(answer_field(page, "subscribers", list, "subscribers"))

    def feeds(self, *, owner: str | None = None) -> list[dict[str, Any]]:
        """GET /v1/feeds: registry entries (feed_id, stream_id, name, description, owner, …) by feed id."""
        return list(answer_field(self.request("GET", "/v1/feeds", query={"owner": owner}), "feeds", list, "feeds"))

    def feed(self, feed_id: int) -> dict[str, Any]:
        """GET /v1/feeds/{feed_id}: one registry entry; FEED_NOT_FOUND if none."""
        return self.request("GET", f"/v1/feeds/{int(feed_id)}")

    # --- Paid feeds: accounts, CBY and entitlements (docs/paid-feeds.md) ---------------------------

    def account_info(self, address: str) -> dict[str, Any]:
        """GET /v1/accounts/{address}: balance_cby, account keys and actor authorizations
        (an account never seen: balance 0 and empty lists)."""
        return self.request("GET", f"/v1/accounts/{self._seg(address)}")

    def entitlement(self, stream_id: str, account: str) -> dict[str, Any]:
        """GET /v1/streams/{id}/entitlements/{account}: active_until_key_epoch (None if none),
        current_key_epoch and paid_stream_config; NOT_PLATFORM_MANAGED_STREAM for an open stream."""
        return self.request("GET", f"/v1/streams/{self._seg(stream_id)}/entitlements/{self._seg(account)}")

    def cby_supply(self) -> dict[str, Any]:
        """GET /v1/cby/supply: total_supply_cby, sum_of_balances_cby and the number of accounts."""
        return self.request("GET", "/v1/cby/supply")

    def keymgr_digest(self) -> dict[str, Any]:
        """GET /v1/keymgr/digest: the rebuild digest of the paid-feed tables."""
        return self.request("GET", "/v1/keymgr/digest")

"""The key manager's reads on the projection HTTP API (docs/http-api.md, `openapi.OPENAPI`).

Each read is answered from the keymgr tables (`keymgr_tables`) by the worker that serves the
partition of the instance holding the fact, as the stream reads are (`routing`):

- ``GET /v1/accounts/{address}``: the instance ``acct:<address>`` (balance, keys, grants);
- ``GET /v1/streams/{stream_id}/entitlements/{account}``: ``paid:<stream_id>`` (config and
  entitlements); ``current_key_epoch`` is the epoch of the current block height, as the writer
  computes it when it decides a purchase;
- ``GET /v1/streams/{stream_id}/key-epochs``: the stream itself (its KeyEpochRotated events);
- ``GET /v1/cby/supply``: ``cby:supply`` holds the total, but the balances are spread over every
  partition, so the worker asked sums its own share and asks the other workers for theirs
  (``GET /v1/cby/supply/local``); unless the shares cover every partition, NOT_READY;
- ``GET /v1/keymgr/digest``: this worker's keymgr tables, comparable with an offline rebuild.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from faust.web import Request, Response

from watchtower.projections.keymgr_tables import account_view, balance_totals, entitlement_key
from watchtower.projections.routing import peer_shares
from watchtower.protocol.addresses import require_address
from watchtower.protocol.errors import NotPlatformManagedStreamError, NotReadyError
from watchtower.protocol.ledger.billing import block_height_at, key_epoch_of_height
from watchtower.protocol.ledger.common import ACCOUNT_PREFIX, PAID_PREFIX, SUPPLY_KEY

LOCAL_SUPPLY_PATH = "/v1/cby/supply/local"


def install(projection: Any, page: Callable[..., Any]) -> None:
    """Register the keymgr reads with the service's `page` decorator (error bodies, routing)."""

    @page("/v1/accounts/{address}", key="address", prefix=ACCOUNT_PREFIX)
    async def account(web: Any, _request: Request, address: str) -> Response:
        require_address(address, "address")
        return web.json(account_view(projection.keymgr["accounts"].get(address), address))

    @page("/v1/streams/{stream_id}/entitlements/{account}", key="stream_id", prefix=PAID_PREFIX)
    async def entitlement(web: Any, _request: Request, stream_id: str, account: str) -> Response:
        require_address(account, "account")
        paid = projection.keymgr["paid_streams"].get(stream_id)
        if paid is None:
            raise NotPlatformManagedStreamError(
                f"stream {stream_id!r} is not a paid (PLATFORM_MANAGED) stream, or is not projected yet; its "
                "messages are free to read, so there is no entitlement to look up")
        config = paid["paid_stream_config"]
        entry = projection.keymgr["entitlements"].get(entitlement_key(stream_id, account))
        height = block_height_at(int(time.time() * 1000))
        return web.json({"stream_id": stream_id, "beneficiary_account": account,
                         "active_until_key_epoch": None if entry is None else int(entry["active_until_key_epoch"]),
                         "current_key_epoch": key_epoch_of_height(height, int(config["key_epoch_blocks"])),
                         "paid_stream_config": config})

    @page("/v1/streams/{stream_id}/key-epochs", key="stream_id")
    async def key_epochs(web: Any, _request: Request, stream_id: str) -> Response:
        projection.stream_view(stream_id)  # STREAM_NOT_FOUND for a stream never created
        entry = projection.keymgr["key_epochs"].get(stream_id)
        epochs = [] if entry is None else [dict(e) for e in entry["epochs"]]
        return web.json({"stream_id": stream_id, "epochs": epochs,
                         "last_key_epoch": epochs[-1]["key_epoch"] if epochs else None})

    @page("/v1/cby/supply/local")  # LOCAL_SUPPLY_PATH
    async def local_supply(web: Any, _request: Request) -> Response:
        return web.json(local_share(projection))

    @page("/v1/cby/supply")
    async def supply(web: Any, _request: Request) -> Response:
        shares = [local_share(projection)]
        covered = set(shares[0]["partitions"])
        if len(covered) < projection.partitions:
            shares += await peer_shares(projection, covered, LOCAL_SUPPLY_PATH, "the balances")
        if {p for s in shares for p in s["partitions"]} != set(range(projection.partitions)):
            raise NotReadyError("the CBY supply needs every partition's balances and some partition does not "
                                "serve right now (a rebalance or a worker catching up); retry in a moment")
        totals = [int(s["total_supply_cby"]) for s in shares if s["total_supply_cby"] is not None]
        return web.json({"total_supply_cby": totals[0] if totals else 0,
                         "sum_of_balances_cby": sum(int(s["sum_of_balances_cby"]) for s in shares),
                         "accounts": sum(int(s["accounts"]) for s in shares)})

    @page("/v1/keymgr/digest")
    async def keymgr_digest(web: Any, _request: Request) -> Response:
        return web.json(projection.keymgr_digest())


def local_share(projection: Any) -> dict[str, Any]:
    """This worker's serving partitions and their part of the balances (and the total, if it holds it)."""
    partitions = [p for p in range(projection.partitions) if projection.owned.serves(p)]
    total, accounts = balance_totals(projection.keymgr["accounts"].items())
    held = projection.keymgr["supply"].get(SUPPLY_KEY)
    supply_partition = projection.partition_of(SUPPLY_KEY)
    supply_total = (int(held["total_supply_cby"]) if held is not None
                    else 0 if supply_partition in partitions else None)
    return {"partitions": partitions, "sum_of_balances_cby": total, "accounts": accounts,
            "total_supply_cby": supply_total}

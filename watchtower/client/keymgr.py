"""`KeyManagerClient`: the Stream Key Manager's HTTP API, every request signed by the calling account.

The requests and their answers are `watchtower.http.keymgr_client.KeyManagerApi` (shared with
ingestion, which encrypts for paid streams); this module adds where the SDK finds the service.

The key manager holds each PLATFORM_MANAGED feed's master seed; the SDK never sees it. It asks:

- ``encrypt`` (the feed's owner or publisher): the envelope of a payload plus the key manager's
  signed receipt, which the publish command must carry;
- ``decrypt`` (an entitled account or its authorized actor): one payload, opened by the service;
- ``epoch_keys`` (an entitled account or its actor): epoch keys sealed to the account's ACTIVE
  X25519 key, opened locally (`client.account_keys`) so later messages decrypt without a call.

Every POST body is ``{"command": <signed Command>}`` with method stream_encrypt / stream_decrypt /
fetch_epoch_keys, envelope stream_id = the feed's stream id and the account's usual microsecond
nonce: the signature proves the caller, the nonce makes a captured request useless to replay.
Errors arrive as ``{"error": {"code", "message"}}`` and are raised as the spec's `WatchtowerError`.

Where the service is: the `url` argument (``--keymgr``), else ``$WATCHTOWER_KEYMGR``, else the
``keymgr_url`` that `watchtower up` wrote to ``$WATCHTOWER_HOME/config.json``, else
http://127.0.0.1:8472.
"""

from __future__ import annotations

import json
import os
from typing import Final

from watchtower.client.home import watchtower_home
from watchtower.http.keymgr_client import (
    ENV_KEYMGR as ENV_KEYMGR,
)
from watchtower.http.keymgr_client import (
    MAX_EPOCHS_PER_FETCH as MAX_EPOCHS_PER_FETCH,
)
from watchtower.http.keymgr_client import (
    Encrypted as Encrypted,
)
from watchtower.http.keymgr_client import (
    KeyManagerApi as KeyManagerApi,
)
from watchtower.http.keymgr_client import (
    SealedEpochKeys as SealedEpochKeys,
)
from watchtower.http.keymgr_client import (
    Signer as Signer,
)

DEFAULT_KEYMGR_URL: Final = "http://127.0.0.1:8472"


def resolve_keymgr_url(flag: str | None = None) -> str:
    """The key manager's base URL, by the order in the module docstring."""
    return (flag or os.environ.get(ENV_KEYMGR) or _recorded() or DEFAULT_KEYMGR_URL).rstrip("/")


def _recorded() -> str | None:
    try:
        data = json.loads((watchtower_home() / "config.json").read_text())
    except (OSError, ValueError):
        return None
    url = data.get("keymgr_url") if isinstance(data, dict) else None
    return url if isinstance(url, str) and url else None


class KeyManagerClient(KeyManagerApi):
    """Synchronous client of one key manager; holds no connection, so it is safe to share."""

    def __init__(self, url: str | None = None, timeout: float = 30.0) -> None:
        super().__init__(resolve_keymgr_url(url), timeout)

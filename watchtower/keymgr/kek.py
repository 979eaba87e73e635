"""The key manager's key-encryption key (KEK): where it comes from.

The KEK (`watchtower.home.kek`: 32 bytes, its AES-256-GCM wrap, its id and the receipt key
derived from it) is read once at start from

- ``WATCHTOWER_KEYMGR_KEK_FILE``: a file holding 64 hex digits, mode 0600 or stricter (a group- or
  world-readable file is refused before it is read), or
- ``WATCHTOWER_KEYMGR_KEK``: the same 64 hex digits in the environment.

It wraps every per-stream master seed; the KEK id names it on ``keymgr.state`` without revealing
it. The names of `watchtower.home.kek` are importable from here as well.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from watchtower.home.kek import (
    KEK_BYTES as KEK_BYTES,
)
from watchtower.home.kek import (
    WRAP_DOMAIN as WRAP_DOMAIN,
)
from watchtower.home.kek import (
    Kek as Kek,
)
from watchtower.home.kek import (
    KekError as KekError,
)
from watchtower.home.kek import (
    new_kek_text as new_kek_text,
)
from watchtower.home.kek import parse_kek_hex
from watchtower.home.kek import (
    read_kek_file as read_kek_file,
)

ENV_KEK_FILE: Final = "WATCHTOWER_KEYMGR_KEK_FILE"
ENV_KEK: Final = "WATCHTOWER_KEYMGR_KEK"


def load_kek(environ: Mapping[str, str] = os.environ) -> Kek:
    """The KEK from ``WATCHTOWER_KEYMGR_KEK_FILE`` (preferred) or ``WATCHTOWER_KEYMGR_KEK``."""
    path = environ.get(ENV_KEK_FILE)
    if path:
        return read_kek_file(Path(path))
    text = environ.get(ENV_KEK)
    if text:
        return Kek(parse_kek_hex(text, ENV_KEK))
    raise KekError(f"no KEK: set {ENV_KEK_FILE} to a 0600 file of 64 hex digits (or {ENV_KEK} to the hex)")

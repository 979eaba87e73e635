"""Where the SDK keeps account keys and the recorded API address: ``$WATCHTOWER_HOME``.

The SDK's own copy of the rule (``~/.watchtower`` unless ``WATCHTOWER_HOME`` says otherwise), so it
need not import the local-stack package; `watchtower.local.paths.watchtower_home` answers the same.
"""

from __future__ import annotations

import os
from pathlib import Path


def watchtower_home() -> Path:
    """The per-user Watchtower directory."""
    return Path(os.environ.get("WATCHTOWER_HOME", Path.home() / ".watchtower")).expanduser()

"""Where the SDK keeps account keys and the recorded API address: ``$WATCHTOWER_HOME``.

The rule lives in `watchtower.home.paths` (``~/.watchtower`` unless ``WATCHTOWER_HOME`` says
otherwise), which the local stack (`watchtower.local.paths`) follows too; the SDK imports no
local-stack package.
"""

from __future__ import annotations

from watchtower.home.paths import watchtower_home as watchtower_home

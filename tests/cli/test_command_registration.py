"""Every command module joins the `watchtower` group in a fresh process, as the installed command runs.

The ``feed ID`` commands live in several modules, each adding its own to the group when imported;
a module `main._register` does not import drops its commands without an error. Other tests import
those modules themselves, so only a process that imports nothing else shows it.
"""

from __future__ import annotations

import subprocess
import sys

FEED_COMMANDS = frozenset({
    "publish", "get-since", "get-head", "get-key-at-sequence", "rotate-publisher-key", "announce-key-epoch", "info",
    "subscribe", "follow", "unsubscribe", "subscribers", "set-policy", "allowlist",
    "acquire-access", "renew", "fetch-keys", "entitlement", "consume",
    "pre-wrap-epochs", "wrap-daemon", "rewrap-epochs", "keyloads", "ingestion",
})
TOP_COMMANDS = frozenset({"new", "list", "feeds", "up", "down", "status", "account", "cby", "replay", "vectors"})


def _commands(*args: str) -> set[str]:
    """The subcommands ``watchtower ARGS --help`` lists, from a new interpreter."""
    out = subprocess.run([sys.executable, "-m", "watchtower.cli", *args, "--help"], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    return {line.split()[0] for line in out.split("Commands:", 1)[1].splitlines() if line.startswith("  ")}


def test_every_feed_id_command_is_registered() -> None:
    missing = FEED_COMMANDS - _commands("feed", "1")
    assert not missing, f"`watchtower feed ID` lacks {sorted(missing)}: import their module in main._register"


def test_every_top_level_command_is_registered() -> None:
    missing = TOP_COMMANDS - _commands()
    assert not missing, f"`watchtower` lacks {sorted(missing)}: add them in main._register"

"""A compose deployment's genesis: ``python deploy/genesis.py DIR``.

Creates, once, the deployment's genesis secrets under DIR (`watchtower.cli.genesis`: the CBY
minter's and the protocol treasury's keys, the runner registrar's key, the key manager's KEK, each
file 0600 in a 0700 directory; nothing is ever overwritten) and writes DIR/genesis.env, the public
values compose.yaml reads (``--env-file``): the treasury, minter and registrar addresses, the key
manager's receipt public key (derived from the KEK) and the KEK file's path for the compose secret
``keymgr_kek``. No secret is written to genesis.env.
"""

from __future__ import annotations

import sys
from pathlib import Path

from watchtower.cli.genesis import ensure_genesis


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python deploy/genesis.py DIR", file=sys.stderr)
        return 2
    home = Path(argv[0]).resolve()
    genesis = ensure_genesis(home)
    # ensure_genesis keeps its files in DIR/genesis/; compose's secret names the KEK file there.
    lines = [f"{name}={value}" for name, value in sorted(genesis.worker_env().items())]
    lines.append(f"WATCHTOWER_COMPOSE_KEK_FILE={genesis.kek_path}")
    env = home / "genesis.env"
    env.write_text("\n".join(lines) + "\n", encoding="ascii")
    print(env)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

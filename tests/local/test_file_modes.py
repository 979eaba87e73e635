"""Files that hold keys on this machine are the owner's alone: 0700 directories, 0600 files.

Without a broker. The broker's own data directory is checked on a real secure broker in
tests/local/test_secure_broker.py (`test_the_brokers_data_and_config_are_readable_by_their_owner_only`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import nacl.signing

from watchtower.client.account import Account
from watchtower.client.account_keys import EPOCH_KEYS_DIR, sealed_keys_path, store_sealed_keys


def _modes(root: Path) -> dict[str, str]:
    """Mode of `root` and of everything under it, by path relative to `root`."""
    return {str(p.relative_to(root)): oct(stat.S_IMODE(p.lstat().st_mode)) for p in [root, *root.rglob("*")]}


def test_the_sealed_epoch_key_cache_is_0700_directories_and_0600_files(tmp_path: Path) -> None:
    """docs: sealed epoch keys are kept 0600 in 0700 directories: the store's root, its account
    directories, the key files and their lock files, whatever the process umask."""
    home = tmp_path / "home"
    home.mkdir()
    account = Account(nacl.signing.SigningKey.generate(), name="alice", home=home)
    old = os.umask(0o022)  # a common default: without explicit modes, 0755 directories and 0644 files
    try:
        store_sealed_keys(account, "s-1", {1: (1, b"\x01" * 80)})
    finally:
        os.umask(old)
    root = home / EPOCH_KEYS_DIR
    assert sealed_keys_path(account, "s-1").is_file()
    modes = _modes(root)
    wrong = {p: m for p, m in modes.items()
             if m != ("0o700" if (root / p).is_dir() else "0o600")}
    assert wrong == {}, modes
    assert any(p.endswith(".lock") for p in modes), modes


def test_an_existing_open_cache_is_closed_on_the_next_store(tmp_path: Path) -> None:
    """A cache an earlier release left 0755 / 0644 is made private when keys are next stored."""
    home = tmp_path / "home"
    account = Account(nacl.signing.SigningKey.generate(), name="bob", home=home)
    path = sealed_keys_path(account, "s-2")
    path.parent.mkdir(parents=True)
    lock = path.with_name(path.name + ".lock")
    lock.write_text("")
    for p, mode in ((home / EPOCH_KEYS_DIR, 0o755), (path.parent, 0o755), (lock, 0o644)):
        os.chmod(p, mode)
    store_sealed_keys(account, "s-2", {3: (1, b"\x02" * 80)})
    modes = _modes(home / EPOCH_KEYS_DIR)
    assert {p: m for p, m in modes.items() if m not in ("0o700", "0o600")} == {}, modes

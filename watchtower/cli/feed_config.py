"""The StreamConfig fields `watchtower new feed` builds from its flags, paid terms included.

A paid feed (``--paid`` = ``--access-mode platform-managed``; ``subscriber-paid`` is the CIP-7
alias) takes every PaidStreamConfig field as a flag except the protocol treasury, which is the
deployment's (CIP-7: publishers may not override it), so the command never carries one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click

POLICIES = {"public": "PUBLIC", "private-allowlist": "PRIVATE_ALLOWLIST"}


def stream_config_fields(owner: str, opts: Mapping[str, Any]) -> dict[str, Any]:
    """The create_stream config for `new feed`'s options; a usage error for paid flags on an open feed."""
    paid_flags = ("fee_per_epoch_cby", "protocol_fee_bps", "key_epoch_blocks", "min_purchase_epochs",
                  "publisher_treasury", "content_cipher", "key_scope")
    config: dict[str, Any] = {k: opts[k] for k in ("ring_buffer_capacity", "max_subscribers",
                                                   "max_push_deliveries_per_block", "max_push_cycles_per_block")
                              if opts.get(k) is not None}
    if opts.get("policy"):
        config["subscription_policy"] = POLICIES[opts["policy"]]
    if opts.get("confidential"):
        if config.get("subscription_policy") != "PRIVATE_ALLOWLIST":
            raise click.UsageError("--confidential needs --policy private-allowlist (keyloads are sealed to the "
                                   "allowlist's members)")
        config["confidential"] = True
    mode = "platform-managed" if opts.get("paid") else opts["access_mode"]
    if opts.get("paid") and opts["access_mode"] == "subscriber-paid":
        mode = "subscriber-paid"  # the same mode under its CIP-7 alias
    if mode == "open":
        given = [f"--{f.replace('_', '-')}" for f in paid_flags if opts.get(f) is not None]
        if given:
            raise click.UsageError(f"{', '.join(given)} only apply to a paid feed (--paid)")
        return config
    if opts.get("fee_per_epoch_cby") is None:
        raise click.UsageError("a paid feed needs --fee-per-epoch-cby")
    # The protocol treasury is the deployment's (CIP-7: publishers may not override it): the
    # stream workers fill it in, so the command does not carry one.
    paid = {"fee_per_key_epoch_cby": opts["fee_per_epoch_cby"], "protocol_fee_bps": opts.get("protocol_fee_bps") or 0,
            "publisher_treasury": opts.get("publisher_treasury") or owner}
    for name in ("key_epoch_blocks", "min_purchase_epochs", "content_cipher", "key_scope"):
        if opts.get(name) is not None:
            paid[name] = opts[name]
    access_mode = "SUBSCRIBER_PAID" if mode == "subscriber-paid" else "PLATFORM_MANAGED"
    return {**config, "access_mode": access_mode, "paid_stream_config": paid}

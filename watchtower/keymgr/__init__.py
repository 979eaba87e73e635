"""The Stream Key Manager service (docs/keymgr.md): the one process that holds master seeds in clear.

- `kek`: the key-encryption key (0600 file or environment), seed wrapping, the derived receipt key;
- `vault`: wrapped seeds and actor-nonce reservations on ``keymgr.state`` (one fenced writer);
- `follower`: the committed events folded into `KeymgrState` and stream states, with `catch_up`
  and `readiness` (what health reports); it reads through `topics.log_follower`, and asks the
  events topic's last stable offsets of `topics.stable_offsets` (a client replaced when it goes stale);
- `service`: signed requests, CIP-7 checks, envelopes, receipts and sealed epoch keys;
- `audit`: who decrypted or fetched which stream's epochs, on the ``keymgr`` topic;
- `http` / `main`: the aiohttp routes and the process (`watchtower keymgr serve`).
"""

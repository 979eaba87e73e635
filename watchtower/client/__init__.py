"""The Python SDK: what an application embeds to talk to a Watchtower API.

The SDK is `sdk` (Publisher, Subscriber, create_feed), `account` (key files), `http` (ApiClient),
`fake` (FakeApi, the same surface in memory) and `home`; for paid feeds `ledger` (keys, actors,
CBY, epoch access), `keymgr` (the Stream Key Manager's client), `paid` (PaidPublisher, EpochKeyRing)
and `account_keys` (X25519 key files, sealed epoch keys at rest). It imports only `watchtower.protocol` and
`watchtower.schemas` (tests/client/test_sdk_imports.py walks every module of the SDK to enforce it):
no Kafka, Faust or aiohttp.
"""

"""The command gateway: ``POST /v1/commands`` over Kafka request/reply, apart from the read side.

The gateway produces each signed command to the ``commands`` topic (keyed by stream, so the worker
that owns the stream's partition decides it) and answers with the committed reply. It keeps no
state of its own, so any number of gateways may run; it needs no partition ownership, so it is
ready as soon as it reaches the broker.

- `transport.CommandClient`: one producer and one reply-reading thread per process; concurrent
  requests are batched by the producer and matched to their replies by correlation id.
- `routes.CommandGateway`: the HTTP handler, mountable on any aiohttp router (a projection
  worker mounts it when ``WATCHTOWER_GATEWAY`` is not ``0``, as `watchtower up` runs it).
- `server`: the gateway as a process of its own (``watchtower gateway``, a compose service).
- `archive`: reading the committed messages straight from the messages topic (tools and tests).
- `sse` and `tail`: ``GET /v1/feeds/{id}/events``, the live feeds as Server-Sent Events (one live
  tail per topic per process, catch-up through the API), served by the gateway and the API
  (docs/sse.md).
- `page` and ``static/``: the feed pages (``/feeds``, ``/feeds/{id}``), verifying every message in
  the browser.
"""

"""Write ``tests/schemas/golden/wire_v1.json``: the bytes today's code writes for every sample record.

Run from the repository root::

    PYTHONPATH=. python tests/schemas/make_wire_golden.py

When regenerating is legitimate
-------------------------------
The golden file pins the bytes on every topic (events, messages, commands, internal, replies,
replay, delivery-state, keymgr, keymgr-state, snapshots). Outside readers, conformance vectors and
logs already written depend on them, so the file changes ONLY together with a new schema or
record version: a new ``<Name>.v<N>.avsc``, a new envelope / record / snapshot version number.
Even then, add the new records (or a new golden file) rather than rewriting the old ones where
the old version is still readable. New samples may also be added for record kinds that did not
exist before.

Never regenerate to make a refactor pass: when `test_wire_golden.py` fails after a change that
was meant to keep the wire format, the change is wrong, not the golden file. The generator refuses
to alter or drop an existing record unless ``--allow-changes`` is given.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden" / "wire_v1.json"

if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from wire_samples import all_samples, dumps, golden_document  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--allow-changes", action="store_true",
                        help="also rewrite or drop records already in the golden file (a new schema version only)")
    args = parser.parse_args(argv)
    document = golden_document(all_samples())
    if GOLDEN.exists() and not args.allow_changes:
        old = {r["name"]: r["hex"] for r in json.loads(GOLDEN.read_text(encoding="utf-8"))["records"]}
        new = {r["name"]: r["hex"] for r in document["records"]}
        changed = sorted(n for n, h in old.items() if new.get(n) != h)
        if changed:
            print(f"refusing: {len(changed)} existing golden record(s) would change or disappear: "
                  f"{', '.join(changed[:10])}{' ...' if len(changed) > 10 else ''}", file=sys.stderr)
            print("the wire format must not change; pass --allow-changes only with a new schema version",
                  file=sys.stderr)
            return 1
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(dumps(document), encoding="utf-8")
    print(f"wrote {len(document['records'])} records to {GOLDEN}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The coverage-guided harness of one decoder: ``python -m fuzz.harness NAME [libFuzzer flags] [corpus dirs]``.

`fuzz.run` starts one of these per decoder (libFuzzer owns the process and exits when it is done
or at the first crash, writing the crashing input to ``-artifact_prefix``). The ``watchtower``
package is instrumented before its first import so that libFuzzer sees its branches. Decoders of
JSON documents get a structure-aware mutator as well (`fuzz.json_mutator`).
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    import atheris  # type: ignore[import-untyped]

    if len(argv) < 2:
        raise SystemExit("usage: python -m fuzz.harness DECODER [libFuzzer flags] [corpus dirs]")
    name = argv[1]
    with atheris.instrument_imports(include=["watchtower", "fuzz"]):
        from fuzz import targets

        target = targets.build()[name]
    if name in targets.JSON_DECODERS:
        from fuzz.json_mutator import mutate_json

        def mutator(data: bytes, max_size: int, seed: int) -> bytes:
            return mutate_json(data, max_size, seed, atheris.Mutate)

        atheris.Setup([argv[0], *argv[2:]], target, custom_mutator=mutator)
    else:
        atheris.Setup([argv[0], *argv[2:]], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)

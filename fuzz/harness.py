"""The coverage-guided harness of one decoder: ``python -m fuzz.harness NAME [libFuzzer flags] [corpus dirs]``.

`fuzz.run` starts one of these per decoder (libFuzzer owns the process and exits when it is done
or at the first crash, writing the crashing input to ``-artifact_prefix``). The ``watchtower``
package is instrumented before its first import so that libFuzzer sees its branches.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    import atheris

    if len(argv) < 2:
        raise SystemExit("usage: python -m fuzz.harness DECODER [libFuzzer flags] [corpus dirs]")
    name = argv[1]
    with atheris.instrument_imports(include=["watchtower", "fuzz"]):
        from fuzz import targets

        target = targets.build()[name]
    atheris.Setup([argv[0], *argv[2:]], target)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)

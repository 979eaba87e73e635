"""`python -m watchtower.cli` runs the `watchtower` command."""

from watchtower.cli.main import main

main()

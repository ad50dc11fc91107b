"""`python -m lrtransfer.cli` is the `lrtransfer` command."""

from lrtransfer.cli.app import main

main()

"""``python -m tenure.cli``: the same as the ``tenure`` command."""

from tenure.cli import main

main()

"""The ``quorumbench`` command line (Typer)."""

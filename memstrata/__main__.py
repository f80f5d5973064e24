"""``python -m memstrata``: the same command line as ``memstrata``."""

from memstrata.cli import app

app(prog_name="memstrata")

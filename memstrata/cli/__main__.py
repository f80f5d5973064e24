"""``python -m memstrata.cli``: the same command line as ``memstrata``."""

from memstrata.cli import app

if __name__ == "__main__":  # pragma: no cover - only run as a program; tools that walk the package import it
    app()

"""``python -m fencemigrate``."""

from .cli import run

run()

"""``python -m fencemigrate``."""

from .cli import main

main()

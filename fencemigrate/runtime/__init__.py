"""The fencing engine: runs Alembic's own environment with every migration step fenced."""

this is not Python, and Alembic never reads __init__.py

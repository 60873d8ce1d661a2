"""Alembic environment with fencing: no migration runs without a fencing token.

Written by `fencemigrate init`. `fencemigrate upgrade REV --token N` fences every step;
plain `alembic -x fence_token=N upgrade REV` is fenced the same way, and plain
`alembic upgrade` without a token refuses to change the database.
"""

from logging.config import fileConfig

from alembic import context
from sqlalchemy import engine_from_config, pool

import fencemigrate.alembic_env

# this is the Alembic Config object, which provides
# access to the values within the .ini file in use.
config = context.config

# Interpret the config file for Python logging.
if config.config_file_name is not None:
    fileConfig(config.config_file_name)

# add your model's MetaData object here for 'autogenerate' support
# from myapp import mymodel
# target_metadata = mymodel.Base.metadata
target_metadata = None


def run_migrations_offline() -> None:
    """Write the migrations, with their fence claims, as SQL (--sql)."""
    url = config.get_main_option("sqlalchemy.url")
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )

    with context.begin_transaction():
        fencemigrate.alembic_env.run_migrations(context)


def run_migrations_online() -> None:
    """Run the migrations on a live connection, each step claiming the fence first."""
    connectable = engine_from_config(
        config.get_section(config.config_ini_section, {}),
        prefix="sqlalchemy.",
        poolclass=pool.NullPool,
    )

    with connectable.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata)

        with context.begin_transaction():
            fencemigrate.alembic_env.run_migrations(context)


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()

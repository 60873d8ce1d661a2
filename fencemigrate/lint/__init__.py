"""``fencemigrate check``: lint and drift detection for fenced migration directories.

The revision files are read with ``ast``, never imported; each rule (``rules/``) has a stable
id and name; findings can be allowed with a reason in the file or in pyproject.toml; with
``--db`` the database is compared too, read through env.py like every other command, and with
it the models (env.py's ``target_metadata``), as ``alembic check`` compares them.

Import what you need from its module (:mod:`.engine`, :mod:`.rules`, :mod:`.findings`, ...): the
package itself imports nothing, so every other command starts without loading the rules.
"""

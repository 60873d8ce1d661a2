"""Put back the guard triggers of an installed fence schema, for ``fencemigrate install``.

A guard trigger that was dropped is created again from the install scripts of the installed
version; on PostgreSQL one that was disabled (``ALTER TABLE ... DISABLE TRIGGER``) is enabled
again. A trigger changed into something else, or a replaced function, is left to ``check --db``
(FM405) and to whoever changed it.
"""

from __future__ import annotations

from sqlalchemy import Connection

from .dialects import dialect_for
from .fence.objects import installed_fence_objects


def restore_guards(connection: Connection, quoted_schema: str, version: str) -> list[str]:
    """Recreate missing guard triggers and enable disabled ones; one line per trigger put back."""
    dialect = dialect_for(connection)
    expected = dialect.expected_fence_objects(quoted_schema, version) or []
    installed = installed_fence_objects(connection, quoted_schema)
    triggers = {item.name: item for item in expected if item.kind == "trigger"}
    done = dict.fromkeys(dialect.enable_disabled_triggers(connection, quoted_schema, set(triggers)), "disabled")
    for name, trigger in triggers.items():
        if ("trigger", name) not in installed and trigger.definition is not None:
            connection.exec_driver_sql(trigger.definition, execution_options={"no_parameters": True})
            done[name] = "missing"
    return [f"put back guard trigger {name} (it was {done[name]})" for name in sorted(done)]

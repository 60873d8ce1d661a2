"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}

"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa
${imports if imports else ""}

revision: str = ${repr(up_revision)}
down_revision: Union[str, Sequence[str], None] = ${repr(down_revision)}
branch_labels: Union[str, Sequence[str], None] = ${repr(branch_labels)}
depends_on: Union[str, Sequence[str], None] = ${repr(depends_on)}


def upgrade() -> None:
    """Apply this revision (fencemigrate claims the fence before this runs)."""
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    """Undo this revision; fencemigrate's checks warn when this is empty."""
    ${downgrades if downgrades else "pass"}

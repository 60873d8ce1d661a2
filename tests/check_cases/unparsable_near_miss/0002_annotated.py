"""annotated, as alembic 1.16's templates write it"""
from typing import Sequence, Union

from alembic import op

revision: str = "0002"
down_revision: Union[str, Sequence[str], None] = "0001"


def upgrade() -> None:
    op.execute("CREATE TABLE u (id int)")


def downgrade() -> None:
    op.execute("DROP TABLE u")

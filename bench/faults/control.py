"""The control: plain ``alembic`` behind a hand-rolled lease, as a team would write one.

``python -m faults.control --url U --resource R --holder H [--ttl S --wait S | --token T]
[--lease-url redis://...] --command "upgrade head" [--command ...]``

The lease is the usual one: a row with holder, token counter and expiry by the database's clock
(or Redis ``SET NX PX`` plus ``INCR``), taken when free or expired, released at the end. The
token is handed to the revisions (``FAULTS_TOKEN``) but nothing checks it where the migration
lands. With ``--token`` it writes under a token it remembers, as the agent in the incident did.
Exit statuses: 0 done, 1 alembic failed, 4 the lease stayed busy for ``--wait``.

On PostgreSQL, ``--claim-lock`` holds a shared advisory lock keyed by ``hashtext(resource)`` on every
connection the run opens, and ``--preempt`` ends the sessions holding that key before the grant, as
a team's "kill the stale migration" would (faults.elements, colliding resource names).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from typing import Any

from alembic.config import main as alembic_main
from sqlalchemy import Connection, create_engine, event, text
from sqlalchemy.pool import NullPool, Pool

NOW = {
    "postgresql": "extract(epoch from clock_timestamp())",
    "sqlite": "((julianday('now') - 2440587.5) * 86400.0)",
    "mysql": "UNIX_TIMESTAMP(NOW(6))",
}


def point(name: str) -> None:
    """Stop here when the harness asked for it."""
    if os.environ.get("FAULTS_STOP_AT") == name:
        os.kill(os.getpid(), signal.SIGSTOP)


def record_grant(conn: Connection, token: int, holder: str) -> None:
    """The grant, in ``faults_history``."""
    conn.execute(
        text("INSERT INTO faults_history (kind, token, holder) VALUES ('grant', :t, :h)"), {"t": token, "h": holder}
    )


#: The advisory-lock class of the control's claim lock.
CLAIM_LOCK_CLASS = 1


def hold_claim_lock(resource: str) -> None:
    """Every new connection (alembic's too) holds the claim lock of ``resource``, shared, for its session."""

    @event.listens_for(Pool, "connect")
    def claim(dbapi_connection: Any, record: Any) -> None:
        with dbapi_connection.cursor() as cursor:
            cursor.execute(f"SELECT pg_advisory_lock_shared({CLAIM_LOCK_CLASS}, hashtext(%s))", (resource,))
        dbapi_connection.commit()


def preempt(url: str, resource: str) -> None:
    """End the sessions holding ``resource``'s claim lock."""
    with create_engine(url, poolclass=NullPool).begin() as conn:
        conn.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                f"AND classid = {CLAIM_LOCK_CLASS} AND objid = hashtext(:r)::oid AND objsubid = 2 "
                "AND pid <> pg_backend_pid()"
            ),
            {"r": resource},
        )


def grant_in_database(url: str, resource: str, holder: str, ttl: float) -> int | None:
    """One attempt at the hand-rolled lease row; the new token, or None while someone else holds it."""
    engine = create_engine(url, poolclass=NullPool)
    now = NOW[engine.dialect.name if engine.dialect.name in NOW else "mysql"]
    with engine.begin() as conn:
        taken = conn.execute(
            text(
                f"UPDATE faults_control_lease SET holder = :h, token = token + 1, expires_at = {now} + :ttl "
                f"WHERE resource = :r AND (expires_at < {now} OR holder = :h)"
            ),
            {"h": holder, "ttl": ttl, "r": resource},
        ).rowcount
        if taken != 1:
            return None
        token = int(
            conn.execute(
                text("SELECT token FROM faults_control_lease WHERE resource = :r"), {"r": resource}
            ).scalar_one()
        )
        record_grant(conn, token, holder)
        point("lease")
    return token


def grant_in_redis(url: str, lease_url: str, resource: str, holder: str, ttl: float) -> int | None:
    """One attempt at a Redis lease (``SET NX PX``, then ``INCR``); the grant is then logged in the database."""
    import redis

    client = redis.Redis.from_url(lease_url)
    if not client.set(f"faults:lease:{resource}", holder, nx=True, px=int(ttl * 1000)):
        return None
    token = int(client.incr(f"faults:token:{resource}"))
    with create_engine(url, poolclass=NullPool).begin() as conn:
        record_grant(conn, token, holder)
        point("lease")
    return token


def release(url: str, lease_url: str | None, resource: str, holder: str, token: int) -> None:
    """Give the lease up (only if it is still this holder's)."""
    if lease_url:
        import redis

        client = redis.Redis.from_url(lease_url)
        if client.get(f"faults:lease:{resource}") == holder.encode():
            client.delete(f"faults:lease:{resource}")
        return
    with create_engine(url, poolclass=NullPool).begin() as conn:
        conn.execute(
            text(
                "UPDATE faults_control_lease SET holder = NULL, expires_at = 0 "
                "WHERE resource = :r AND holder = :h AND token = :t"
            ),
            {"r": resource, "h": holder, "t": token},
        )


def acquire(args: argparse.Namespace) -> int | None:
    """Poll for the lease until ``--wait`` runs out."""
    deadline = time.monotonic() + args.wait
    while True:
        if args.lease_url:
            token = grant_in_redis(args.url, args.lease_url, args.resource, args.holder, args.ttl)
        else:
            token = grant_in_database(args.url, args.resource, args.holder, args.ttl)
        if token is not None or time.monotonic() >= deadline:
            return token
        time.sleep(0.05)


def run_alembic(commands: list[str]) -> int:
    """Each command with plain alembic, in this process; 1 at the first failure."""
    for command in commands:
        try:
            alembic_main(argv=["-c", "alembic.ini", *command.split()])
        except SystemExit as stop:
            if stop.code not in (None, 0):
                return 1
        except Exception as error:  # noqa: BLE001 - plain alembic's failure is an exit 1
            print(f"alembic {command}: {error}", file=sys.stderr)
            return 1
    return 0


def main() -> None:
    """Take the lease (unless ``--token``), run the commands, release."""
    parser = argparse.ArgumentParser()
    for name in ("--url", "--resource", "--holder"):
        parser.add_argument(name, required=True)
    parser.add_argument("--ttl", type=float, default=60.0)
    parser.add_argument("--wait", type=float, default=0.0)
    parser.add_argument("--token", type=int)
    parser.add_argument("--lease-url")
    parser.add_argument("--acquire-only", action="store_true")
    parser.add_argument("--command", action="append", default=[])
    parser.add_argument("--claim-lock", action="store_true")
    parser.add_argument("--preempt", action="store_true")
    args = parser.parse_args()
    if args.claim_lock:
        hold_claim_lock(args.resource)
    if args.preempt:
        preempt(args.url, args.resource)
    token = args.token
    if token is None:
        token = acquire(args)
        if token is None:
            print(f"lease busy after {args.wait:g}s", file=sys.stderr)
            raise SystemExit(4)
        print(f"token {token}")
        if args.acquire_only:
            raise SystemExit(0)
    os.environ["FAULTS_TOKEN"] = str(token)
    status = run_alembic(args.command)
    if args.token is None:
        release(args.url, args.lease_url, args.resource, args.holder, token)
    raise SystemExit(status)


if __name__ == "__main__":
    main()

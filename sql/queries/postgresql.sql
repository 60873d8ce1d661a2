-- fencemigrate's named statements on PostgreSQL, one section each: a `name: <name>` comment line, then the
-- comment lines that say what it does, then the statement (the format aiosql reads). The runner
-- loads a section by name (fencemigrate/queries.py: every line that starts with `--` is dropped,
-- {schema} becomes the quoted fence schema, {<key>} an advisory-lock key of sql/advisory_locks.conf)
-- and runs it through SQLAlchemy; :name is a bound parameter. The fence schema itself is installed
-- by sql/fencemigrate--<version>.sql.

-- name: adoption_lock
-- Serialise first runs (and installs) adopting a version table's history until this transaction
-- ends: the install lock, so that only one of them finds the ledger empty.
SELECT pg_advisory_xact_lock(hashtext({install_lock_key}))

-- name: allow_tokenless_writes
-- Opt out: record that :version_table takes writes without a token and remove its guard trigger.
SELECT {schema}.allow_tokenless_writes(:version_table, to_regclass(:relation))

-- name: applied_source
-- `fencemigrate show REV --applied` and check --db's drift diff: the ledger row of :revision with
-- the text of its file as applied (source NULL: not recorded).
SELECT revision, resource, applied_token, holder, method, applied_at, state, script_sha256, source
  FROM {schema}.applied_revision
 WHERE version_table = :version_table AND revision = :revision

-- name: apply_order
-- Where each revision's latest APPLY or STAMP event sits in the event log, per resource. Events are
-- numbered in the order they were logged, each in the transaction that wrote its ledger row, so
-- this orders the ledger rows that share an applied_at (one transaction's, or one clock tick's).
SELECT resource, revision, max(id) AS seq
  FROM {schema}.fence_event
 WHERE kind IN ('APPLY', 'STAMP')
   AND revision IS NOT NULL
 GROUP BY resource, revision

-- name: autocommit_fenced
-- FENCED runs whose revision had run statements in an autocommit block (committed on their own,
-- outside the fenced transaction, so possibly left applied): `fencemigrate state` names them.
SELECT at, resource, holder, token, detail
  FROM {schema}.fence_event
 WHERE kind = 'FENCED' AND detail LIKE '%"autocommitted"%'
 ORDER BY at, id

-- name: begin_apply
-- Pre-check mode, before :revision's DDL: its ledger row, marked 'applying' under :token, written
-- only while the fence still holds :token (0 rows: a newer token has written, FENCED), and
-- committed before the DDL runs; write_ledger_row() settles it in the transaction that writes
-- Alembic's version row. A row still 'applying' afterwards is a dirty revision.
INSERT INTO {schema}.applied_revision
       (version_table, revision, resource, applied_token, holder, method, script_sha256, source,
        state, state_token, state_holder, state_since)
SELECT :version_table, :revision, :resource, :token, :holder, 'upgrade', :script_sha256, :source,
       'applying', :token, :holder, clock_timestamp()
  FROM {schema}.agent_fence f
 WHERE f.resource = :resource AND f.token = :token
ON CONFLICT (version_table, revision) DO UPDATE
   SET resource = excluded.resource, applied_token = excluded.applied_token, holder = excluded.holder,
       method = excluded.method, applied_at = now(), script_sha256 = excluded.script_sha256,
       source = excluded.source,
       state = 'applying', state_token = excluded.state_token, state_holder = excluded.state_holder,
       state_since = excluded.state_since

-- name: begin_rollback
-- Pre-check mode, before :revision's downgrade DDL: its ledger row marked 'rolling_back' under
-- :token (created for a revision no fenced run recorded), only while the fence still holds
-- :token (0 rows: FENCED), and committed before the DDL runs; the ledger row goes with Alembic's
-- version row afterwards.
INSERT INTO {schema}.applied_revision
       (version_table, revision, resource, applied_token, holder, method,
        state, state_token, state_holder, state_since)
SELECT :version_table, :revision, :resource, :token, :holder, 'upgrade',
       'rolling_back', :token, :holder, clock_timestamp()
  FROM {schema}.agent_fence f
 WHERE f.resource = :resource AND f.token = :token
ON CONFLICT (version_table, revision) DO UPDATE
   SET state = 'rolling_back', state_token = excluded.state_token,
       state_holder = excluded.state_holder, state_since = excluded.state_since

-- name: check_fence_objects
-- The fence schema :quoted_schema as the catalogs have it, for `fencemigrate check --db`, which
-- compares it with the install scripts: its tables, its triggers (definition, and whether they
-- fire: tgenabled 'O' or 'A'; 'D' is disabled, and 'R' fires only in
-- replication sessions, so it does not guard anything either) and its functions (body). One row per object.
WITH fence AS (
    SELECT n.oid
      FROM pg_catalog.pg_namespace n
     WHERE n.nspname = (pg_catalog.parse_ident(:quoted_schema))[1]
)
SELECT 'table' AS kind, c.relname AS name, NULL AS definition, true AS enabled
  FROM pg_catalog.pg_class c
 WHERE c.relnamespace = (SELECT oid FROM fence)
   AND c.relkind IN ('r', 'p')
UNION ALL
SELECT 'trigger', t.tgname, pg_catalog.pg_get_triggerdef(t.oid), t.tgenabled IN ('O', 'A')
  FROM pg_catalog.pg_trigger t
  JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
 WHERE c.relnamespace = (SELECT oid FROM fence)
   AND NOT t.tgisinternal
UNION ALL
SELECT 'function', p.proname, p.prosrc, true
  FROM pg_catalog.pg_proc p
 WHERE p.pronamespace = (SELECT oid FROM fence)
 ORDER BY 1, 2

-- name: check_reapply
-- Refuse (FM001) unless every revision in :revisions was applied under :token.
SELECT {schema}.check_reapply(:version_table, :resource, :revisions, :token)

-- name: claim
-- Claim the fence for :resource with :token; raises FM001 (FENCED) if a higher token has written.
SELECT {schema}.claim(:resource, :token)

-- name: claim_and_record
-- Claim, write the ledger row of the revision about to run and ask for the check at COMMIT.
SELECT {schema}.claim_and_record(:resource, :token, :version_table, to_regclass(:version_relation), :revision, :holder, :script_sha256, :source)

-- name: claim_and_record_now
-- claim_locks_now and claim_and_record in one round trip, the usual case of a transaction per
-- revision: when no other transaction holds the claim's locks, take them, name this transaction,
-- claim, write the ledger row and ask for the check at COMMIT; the transaction id. NULL (another
-- transaction holds a lock) or no row (:resource has no lock key yet): nothing claimed or written;
-- the caller waits for the locks in slices, then runs claim_and_record.
SELECT CASE WHEN NOT pg_try_advisory_xact_lock_shared({claim_lock_class}, k.key) THEN NULL
            WHEN NOT EXISTS (SELECT 1 FROM {schema}.agent_fence f WHERE f.resource = k.resource FOR UPDATE SKIP LOCKED)
                THEN NULL
            WHEN set_config('application_name', :application_name, true) IS NULL THEN NULL
            ELSE {schema}.claim_and_record(:resource, :token, :version_table, to_regclass(:version_relation),
                                           :revision, :holder, :script_sha256, :source)
       END
  FROM {schema}.resource_lock_key k
 WHERE k.resource = :resource

-- name: claim_locks_now
-- Take now, without waiting, the locks a claim of :resource waits for (the claim lock, shared, then the
-- fence row, in the claim's order); once both are held, name this transaction as the claimant statement
-- does. True when both are taken: the claim that follows finds them held. False (another transaction
-- holds one) or no row (:resource has no lock key yet): the claim waits for them in slices of
-- lock_timeout instead. CASE tries each in turn and stops at the first that fails.
SELECT CASE WHEN NOT pg_try_advisory_xact_lock_shared({claim_lock_class}, k.key) THEN false
            WHEN NOT EXISTS (SELECT 1 FROM {schema}.agent_fence f WHERE f.resource = k.resource FOR UPDATE SKIP LOCKED)
                THEN false
            ELSE set_config('application_name', :application_name, true) IS NOT NULL
       END
  FROM {schema}.resource_lock_key k
 WHERE k.resource = :resource

-- name: claim_lock
-- Wait (at most lock_timeout) until no transaction holds a claim on :resource, and keep new claims
-- out until this transaction ends: claim() takes the same advisory lock in shared mode.
-- The resource's lock key is given now if it has none: a first claim of :resource still in flight
-- (its key not committed) makes this wait too.
SELECT pg_advisory_xact_lock({claim_lock_class}, {schema}.resource_key(:resource))

-- name: claimant
-- Once the claim is taken: lock_timeout back to what it was, and this transaction named for those who
-- wait behind it (the fence_holders statement reads it): 'fencemigrate token <n> <holder>', cut to PostgreSQL's
-- 63 bytes. Both are local to the transaction: they end with it.
SELECT set_config('lock_timeout', :lock_timeout, true), set_config('application_name', :application_name, true)

-- name: create_scratch_database
-- `fencemigrate demo --url`: an empty database of the demo's own on that server ({database}: its
-- quoted name). CREATE DATABASE runs outside any transaction: on an autocommit connection.
CREATE DATABASE {database}

-- name: current_lock_timeout
-- This session's lock_timeout now, restored after a wait for the fence set its own slices.
SELECT current_setting('lock_timeout')

-- name: detach_fence
-- `lease detach`: :resource takes external tokens (--token) above its fence token from now on.
-- 0 rows: it has no fence row.
UPDATE {schema}.agent_fence SET token_source = 'external' WHERE resource = :resource

-- name: drop_scratch_database
-- `fencemigrate demo --url`, when it is done: its database dropped, with whatever is still
-- connected to it ({database}: its quoted name; WITH (FORCE): PostgreSQL 13 or later).
DROP DATABASE IF EXISTS {database} WITH (FORCE)

-- name: enable_trigger_statements
-- For `fencemigrate install`: the statements that make the disabled triggers of the fence schema
-- :quoted_schema fire again (tgenabled 'D', or 'R': replication sessions only), one row per trigger.
SELECT t.tgname AS name,
       pg_catalog.format('ALTER TABLE %s ENABLE TRIGGER %I', t.tgrelid::pg_catalog.regclass, t.tgname) AS statement
  FROM pg_catalog.pg_trigger t
  JOIN pg_catalog.pg_class c ON c.oid = t.tgrelid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = (pg_catalog.parse_ident(:quoted_schema))[1]
   AND NOT t.tgisinternal
   AND t.tgenabled NOT IN ('O', 'A')
 ORDER BY t.tgname

-- name: extension_version
-- The version of the fencemigrate extension when it was loaded with CREATE EXTENSION into the
-- fence schema :quoted_schema, else no row (a runner-installed copy elsewhere is not the extension).
SELECT e.extversion
  FROM pg_catalog.pg_extension e
  JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace
 WHERE e.extname = 'fencemigrate'
   AND n.nspname = (pg_catalog.parse_ident(:quoted_schema))[1]

-- name: fence_below_lease
-- Resources whose fence token is below the last token the built-in lease service issued (or
-- that have no fence row although a token was issued): every grant advances the fence to its
-- token in the same transaction, so only a lowered or deleted fence row leaves this.
SELECT l.resource, f.token AS fence_token, l.token AS lease_token
  FROM {schema}.lease l
  LEFT JOIN {schema}.agent_fence f ON f.resource = l.resource
 WHERE l.token > 0 AND (f.token IS NULL OR f.token < l.token)
 ORDER BY l.resource

-- name: fence_holders
-- Who holds the fence of :resource now: the sessions whose transaction holds its claim lock (every
-- claim holds it shared until its transaction ends, a grant exclusively), oldest transaction first,
-- with their application_name (the claimant statement names a claim's transaction), when their transaction
-- began, its state and its last statement. pg_locks is server-wide: only this database's locks count.
SELECT a.pid, a.application_name, a.xact_start, a.state, a.query
  FROM pg_locks l
  JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory'
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND l.classid = {claim_lock_class}
   AND l.objid = {schema}.lock_key(:resource)::oid
   AND l.objsubid = 2
   AND l.granted
   AND l.pid <> pg_backend_pid()
 ORDER BY a.xact_start, a.pid

-- name: fence_lock
-- Lock the fence row of :resource: waits for an in-flight migration's transaction, which holds it.
SELECT token FROM {schema}.agent_fence WHERE resource = :resource FOR UPDATE

-- name: fence_rows
-- Every fenced resource and the highest token that has written to it.
SELECT resource, token, updated_at FROM {schema}.agent_fence ORDER BY resource

-- name: fence_source
-- The fence token of :resource and where its tokens come from ('external', 'lease service',
-- 'redis'); no row: never claimed nor granted.
SELECT token, token_source FROM {schema}.agent_fence WHERE resource = :resource

-- name: fence_token
-- The fence token of :resource (no row: never claimed).
SELECT token FROM {schema}.agent_fence WHERE resource = :resource

-- name: fence_wait_release
-- The fence was taken within the slice: keep what it took (its locks stay until the transaction ends).
RELEASE SAVEPOINT fencemigrate_fence_wait

-- name: fence_wait_rollback
-- A slice of the wait for the fence ran out (lock_timeout): undo it, the transaction goes on.
ROLLBACK TO SAVEPOINT fencemigrate_fence_wait

-- name: fence_wait_savepoint
-- Before one slice of a wait for the fence (lock_timeout bounds it): a lock wait that runs out
-- rolls back to here, and the migration's transaction goes on.
SAVEPOINT fencemigrate_fence_wait

-- name: forbid_tokenless_writes
-- Opt back in: forget the opt-out of :version_table and guard it again (true when guarded).
SELECT {schema}.forbid_tokenless_writes(:version_table, to_regclass(:relation))

-- name: forget_revision
-- `fencemigrate resolve REV --as rolled-back`: the dirty row of :revision goes.
DELETE FROM {schema}.applied_revision WHERE version_table = :version_table AND revision = :revision

-- name: grant_fence
-- A grant's fence advance: :resource moves up to the :token its lease service (:source) has just
-- issued under the database's :incarnation, and takes its tokens from that service from now on
-- (advance_fence(), run as the owner of the fence: the only way to raise a Redis-sourced fence); a
-- resource never claimed gets its fence row. 0 rows: a token at or above :token has written. The
-- grant holds the fence row, or the claim lock, already.
SELECT advanced FROM {schema}.advance_fence(:resource, CAST(:token AS bigint), :source, :incarnation) AS advanced
 WHERE advanced

-- name: grant_lock
-- Serialise grants of :resource by an external lease service (Redis) until this transaction ends.
-- The fence row lock does this once the resource has been claimed; before its first claim there is
-- no row to lock. Waits at most the transaction's lock_timeout.
-- Keyed by the resource's lock key as the committed rows have it (lock_key(): not given here, so a
-- first claim in flight never makes this wait before a --preempt can end it).
SELECT pg_advisory_xact_lock({grant_lock_class}, {schema}.lock_key(:resource))

-- name: grant_replication
-- Per fenced resource: the incarnation of the database its last grant ran on, and how its lease's
-- grant was replicated while the lease has a holder ('synchronous': confirmed by a standby;
-- 'asynchronous'; NULL: free, as after a grant released because no standby confirmed it, not
-- leased here).
SELECT f.resource, f.incarnation, CASE WHEN l.holder IS NOT NULL THEN l.replication END AS replication
  FROM {schema}.agent_fence f
  LEFT JOIN {schema}.lease l ON l.resource = f.resource

-- name: grant_to_migration_role
-- `fencemigrate install --grant-to ROLE`: what the role that runs migrations may read and write in
-- the fence schema, which it does not own (see grant_to_migration_role() in the fence schema).
SELECT {schema}.grant_to_migration_role(:role)

-- name: grant_version_table
-- `fencemigrate install --grant-to ROLE`, after grant_to_migration_role(): the GRANT that lets ROLE
-- read and write Alembic's version table :relation, which install created as the owner of the
-- fence, so ROLE writes its rows but cannot drop, alter or switch off the table's guard trigger.
-- NULL when the table does not exist (tokenless writes allowed: ROLE creates and owns it).
SELECT format('GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE %s TO %I', to_regclass(:relation), CAST(:role AS text))
 WHERE to_regclass(:relation) IS NOT NULL

-- name: guard_version_table
-- Put the guard trigger on Alembic's version table :relation (ledger name :version_table) unless it
-- is there, the table does not exist yet or tokenless writes were allowed: true when guarded.
SELECT {schema}.guard_version_table(:version_table, to_regclass(:relation))

-- name: implausible_leases
-- Held leases granted further in the future than their TTL by the database's clock (stepped back
-- since): implausible, counted as expired (the lease_peek statement).
SELECT resource, holder, token, granted_at, ttl_ms
  FROM {schema}.lease
 WHERE holder IS NOT NULL
   AND granted_at > clock_timestamp() + ttl_ms * interval '1 millisecond'
 ORDER BY resource

-- name: incarnation
-- This database's incarnation, the WAL timeline in it, and the incarnation recorded by the last
-- grant of :resource (its fence row, which the grant has locked): the cluster's system identifier
-- (a restore into a new cluster changes it), the WAL timeline the server writes on now (a
-- promotion or a point-in-time recovery starts a new one; read from the current WAL file's name,
-- which moves at once, unlike pg_control_checkpoint() before the first checkpoint) and the
-- database's OID (a restore into a new database changes it). Callable by any role.
WITH now_on AS (
    SELECT (pg_control_system()).system_identifier AS system_identifier,
           ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint AS timeline,
           (SELECT d.oid FROM pg_catalog.pg_database d WHERE d.datname = current_database()) AS database_oid
)
SELECT format('%s/%s/%s', n.system_identifier, n.timeline, n.database_oid) AS current,
       n.timeline,
       (SELECT f.incarnation FROM {schema}.agent_fence f WHERE f.resource = :resource) AS recorded
  FROM now_on n

-- name: install_lock
-- Serialise concurrent installs of the fence schema until this transaction ends.
SELECT pg_advisory_xact_lock(hashtext({install_lock_key}))

-- name: installed_probe
-- Whether the fence schema is installed: one row when {schema}.schema_version() exists.
-- A plain scan of the catalogs, not a name lookup (to_regprocedure): a lookup that finds nothing
-- is cached by this session, and would hide an install that another session commits while this
-- transaction waits for the install lock.
SELECT 1
  FROM pg_catalog.pg_proc p
  JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = (pg_catalog.parse_ident(:quoted_schema))[1]
   AND p.proname = 'schema_version'
   AND p.pronargs = 0

-- name: lease_grant
-- Grant the (locked) lease of :resource to :holder under the new :token, for :ttl_ms by the
-- database's clock, saying how the grant is replicated (:replication, see the synchronous_grant statement).
UPDATE {schema}.lease
   SET holder = :holder, token = :token, ttl_ms = :ttl_ms, replication = :replication,
       granted_at = clock_timestamp(),
       expires_at = clock_timestamp() + :ttl_ms * interval '1 millisecond'
 WHERE resource = :resource
RETURNING granted_at, expires_at

-- name: lease_listen
-- A runner waiting for the lease hears every release in this database (the lease_release statement);
-- the payload is the resource released.
LISTEN fencemigrate_lease

-- name: lease_lock
-- Lock the lease row of :resource for a grant (after the fence row) and read it again; a lease
-- granted further in the future than its TTL is implausible (the lease_peek statement) and counts as expired.
SELECT holder, token, granted_at, expires_at,
       expires_at <= clock_timestamp()
           OR coalesce(granted_at > clock_timestamp() + ttl_ms * interval '1 millisecond', false) AS expired,
       coalesce(granted_at > clock_timestamp() + ttl_ms * interval '1 millisecond', false) AS implausible
  FROM {schema}.lease
 WHERE resource = :resource
   FOR UPDATE

-- name: lease_peek
-- The lease of :resource as the database's clock sees it now, how its grant was replicated, and
-- the fence token (no locks; one row even for a resource never leased or fenced). A lease granted
-- further in the future than its TTL (the clock was stepped back since) is implausible, and
-- counts as expired: the fence keeps safety.
SELECT l.holder, coalesce(l.token, 0) AS token, l.ttl_ms, l.granted_at, l.expires_at,
       coalesce(l.expires_at <= clock_timestamp(), false)
           OR coalesce(l.granted_at > clock_timestamp() + l.ttl_ms * interval '1 millisecond', false) AS expired,
       coalesce(l.granted_at > clock_timestamp() + l.ttl_ms * interval '1 millisecond', false) AS implausible,
       l.replication, f.token AS fence_token
  FROM (SELECT CAST(:resource AS text) AS resource) r
  LEFT JOIN {schema}.lease l ON l.resource = r.resource
  LEFT JOIN {schema}.agent_fence f ON f.resource = r.resource

-- name: lease_release
-- Free :holder's lease of :resource (the grant with :token, or its current one when NULL); the
-- token counter stays. A release also wakes the runners waiting for the lease (LISTEN
-- fencemigrate_lease, see the lease_listen statement): the notification goes out when this transaction
-- commits, and only when a grant was released.
WITH released AS (
    UPDATE {schema}.lease
       SET holder = NULL, ttl_ms = NULL, granted_at = NULL, expires_at = NULL
     WHERE resource = :resource
       AND holder = :holder
       AND token = coalesce(CAST(:token AS bigint), token)
    RETURNING token
)
SELECT token, pg_notify('fencemigrate_lease', CAST(:resource AS text)) AS woken FROM released

-- name: lease_renew
-- Extend :holder's lease of :resource (the grant with :token, or its current one when NULL) by :ttl_ms,
-- or by the TTL it was granted (or last renewed) with when :ttl_ms is NULL.
-- A lease stays its holder's until someone else is granted it: renewing after expiry is allowed.
WITH old AS (
    SELECT resource, expires_at <= clock_timestamp() AS expired
      FROM {schema}.lease
     WHERE resource = :resource
       FOR UPDATE
)
UPDATE {schema}.lease l
   SET ttl_ms = coalesce(CAST(:ttl_ms AS bigint), l.ttl_ms),
       expires_at = clock_timestamp() + coalesce(CAST(:ttl_ms AS bigint), l.ttl_ms) * interval '1 millisecond'
  FROM old
 WHERE l.resource = old.resource
   AND l.holder = :holder
   AND l.token = coalesce(CAST(:token AS bigint), l.token)
RETURNING l.token, l.granted_at, l.expires_at, old.expired AS was_expired

-- name: lease_seed
-- The lease row of :resource, created free with its token counter at 0 on first use.
INSERT INTO {schema}.lease (resource, token) VALUES (:resource, 0) ON CONFLICT (resource) DO NOTHING

-- name: lease_unlisten
-- The wait is over (granted, busy or nothing left to do).
UNLISTEN fencemigrate_lease

-- name: ledger_above_fence
-- Ledger rows no fenced run can leave: applied under a token above the fence token of their
-- resource, or with no fence row at all (every write claims the fence first, and the fence never
-- goes down). Only a lowered or deleted fence row, the guard triggers switched off, leaves them.
-- Adopted rows (method 'adopt', token 0: applied before fencing) claim nothing: left out.
SELECT a.version_table, a.revision, a.resource, a.applied_token, f.token AS fence_token
  FROM {schema}.applied_revision a
  LEFT JOIN {schema}.agent_fence f ON f.resource = a.resource
 WHERE a.method <> 'adopt' AND (f.token IS NULL OR a.applied_token > f.token)
 ORDER BY a.version_table, a.revision

-- name: ledger_exists
-- Whether the ledger has a row of :version_table (none: a database fenced for the first time
-- adopts the revisions its version table applies).
SELECT 1 FROM {schema}.applied_revision WHERE version_table = :version_table LIMIT 1

-- name: ledger_rows
-- The ledger of one Alembic version table, oldest first (state.py orders the rows of one
-- applied_at by the event log), with each revision's state ('applied', or 'applying' /
-- 'rolling_back' when pre-check mode left it dirty). state is read through
-- to_jsonb so that `fencemigrate state` still reads a ledger whose state column was dropped.
SELECT revision, resource, applied_token, holder, method, applied_at, script_sha256,
       coalesce(to_jsonb(a) ->> 'state', 'applied') AS state
  FROM {schema}.applied_revision a
 WHERE version_table = :version_table
 ORDER BY applied_at, revision

-- name: ledger_seen
-- Whether the ledger has a row of :version_table: adoption's first look, before its lock (the same
-- read as the ledger_exists statement, which asks again under the lock).
SELECT 1 FROM {schema}.applied_revision WHERE version_table = :version_table LIMIT 1

-- name: lock_timeout
-- Bound every lock wait of this transaction (milliseconds, as text).
SELECT set_config('lock_timeout', :timeout_ms, true)

-- name: locked_fence_source
-- Where the tokens of :resource come from, read by a grant or detach that has locked the fence
-- row already (the fence_lock statement): the committed value, which cannot change before it commits.
-- No row: never claimed nor granted.
SELECT token_source FROM {schema}.agent_fence WHERE resource = :resource FOR UPDATE

-- name: log_event
-- Append one event to the log read by `fencemigrate timeline`; :at is NULL for "now" (the database's
-- clock), or when it happened (an expiry is seen after the fact but dated when the lease ran out).
-- Through the owner's log_event(), which alone writes the log (a GRANT event only in its grant's
-- transaction).
SELECT {schema}.log_event(CAST(:at AS timestamptz), :resource, :kind, :holder, CAST(:token AS bigint), :revision, :detail)

-- name: named_lock
-- Take pre-check mode's named lock on :resource for this session, waiting at most :timeout_ms:
-- 1 when taken, 0 when it was not free in time.
SELECT {schema}.named_lock(:resource, CAST(:timeout_ms AS bigint))::int

-- name: named_lock_holder
-- The backend pid of the session holding pre-check mode's named lock on :resource (no row: free).
-- pg_locks is server-wide: only this database's advisory locks are this resource's.
SELECT pid FROM pg_locks
 WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND classid = {named_lock_class} AND objid = {schema}.lock_key(:resource)::oid
   AND objsubid = 2 AND granted

-- name: named_lock_name
-- How pre-check mode's named lock on :resource is shown to people (the lock itself is a pair of
-- advisory locks keyed by the resource's lock key: see named_lock() in the fence schema).
SELECT 'fencemigrate:' || current_database() || '/' || :resource

-- name: named_lock_release
-- Release this session's named lock on :resource.
SELECT {schema}.named_lock_release(:resource)

-- name: named_lock_session
-- Who holds pre-check mode's named lock on :resource: its backend pid, what it runs (state, seconds in
-- it, statement), and the pre-check run it is: the holder, token and start of the revision it marked
-- in flight (none before its first revision's mark), else the fence token (its claim, committed
-- under the lock). No row when the lock is free.
SELECT s.pid, s.state AS command, floor(extract(epoch FROM now() - s.state_change))::int AS seconds,
       s.query AS info, m.state_holder AS holder, COALESCE(m.state_token, f.token) AS token,
       m.state_since AS since
  FROM pg_stat_activity s
  LEFT JOIN LATERAL (SELECT a.state_holder, a.state_token, a.state_since
                       FROM {schema}.applied_revision a
                      WHERE a.resource = :resource AND a.state <> 'applied'
                      ORDER BY a.state_since DESC LIMIT 1) m ON TRUE
  LEFT JOIN {schema}.agent_fence f ON f.resource = :resource
 WHERE s.pid IN (SELECT l.pid FROM pg_locks l
                  WHERE l.locktype = 'advisory'
                    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
                    AND l.classid = {named_lock_class} AND l.objid = {schema}.lock_key(:resource)::oid
                    AND l.objsubid = 2 AND l.granted)

-- name: preempt_grant_transactions
-- --preempt by a Redis grant (which holds the Redis lease key: nobody else's lease is live):
-- terminate the sessions stuck inside another grant's transaction on :resource, holding
-- the grant_lock statement's advisory lock in this database, whose client has sent nothing for :idle_ms
-- (its process paused or stopped). pg_terminate_backend waits up to :wait_ms for each.
SELECT a.pid, pg_terminate_backend(a.pid, :wait_ms) AS terminated
  FROM pg_locks l
  JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.mode = 'ExclusiveLock' AND l.granted
   AND l.classid = {grant_lock_class} AND l.objid = {schema}.lock_key(:resource)::oid
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND a.state IN ('idle in transaction', 'idle in transaction (aborted)')
   AND a.state_change <= clock_timestamp() - :idle_ms * interval '1 millisecond'
   AND a.pid <> pg_backend_pid()

-- name: preempt_lease_transactions
-- --preempt: terminate the sessions stuck inside a lease transaction on :resource: a grant, renew
-- or release that changed or locked the lease row and whose client has sent nothing for :idle_ms
-- (its process paused or stopped). The lease row's xmax names the transaction holding it; only
-- while the lease as committed has no live holder (free, or expired by this database's clock),
-- and only sessions of this database. pg_terminate_backend waits up to :wait_ms for each to exit.
SELECT a.pid, pg_terminate_backend(a.pid, :wait_ms) AS terminated
  FROM {schema}.lease s
  JOIN pg_locks l
    ON l.locktype = 'transactionid' AND l.transactionid = s.xmax AND l.mode = 'ExclusiveLock' AND l.granted
  JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE s.resource = :resource
   AND (s.holder IS NULL OR s.expires_at <= clock_timestamp())
   AND a.datname = current_database()
   AND a.state IN ('idle in transaction', 'idle in transaction (aborted)')
   AND a.state_change <= clock_timestamp() - :idle_ms * interval '1 millisecond'
   AND a.pid <> pg_backend_pid()

-- name: preempt_writer
-- --preempt: end the session :connection_id (a backend pid), a stale pre-check writer holding the
-- resource's named lock, waiting up to :wait_ms for it to exit. Its open transaction rolls back and
-- the lock is released; a revision it was running stops midway and stays marked dirty.
SELECT pg_terminate_backend(:connection_id, :wait_ms)

-- name: preempt_writers
-- Terminate the sessions whose transaction holds a claim on :resource (claim() takes this shared
-- advisory lock until its transaction ends): a stale writer's in-flight migration rolls back.
-- pg_terminate_backend waits up to :wait_ms for each to exit. pg_locks is server-wide and advisory
-- locks are per database: only this database's sessions on this resource are ever looked at. The
-- resource's lock key is its own (lock_key(): a first claim in flight took the key it will have).
SELECT l.pid, pg_terminate_backend(l.pid, :wait_ms) AS terminated
  FROM pg_locks l
 WHERE l.locktype = 'advisory'
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND l.classid = {claim_lock_class}
   AND l.objid = {schema}.lock_key(:resource)::oid
   AND l.objsubid = 2
   AND l.granted
   AND l.pid <> pg_backend_pid()

-- name: record_adopted
-- Record :revision as adopted: the version table applied it before the database was fenced, so no
-- token applied it (applied_token 0, method 'adopt'); with its file's sha256 and text when the file
-- is there. The ADOPT event is logged once for all of them (the log_event statement).
INSERT INTO {schema}.applied_revision
       (version_table, revision, resource, applied_token, holder, method, script_sha256, source)
VALUES (:version_table, :revision, :resource, 0, :holder, 'adopt', :script_sha256, :source)

-- name: record_apply
-- Record that :revision was applied (or stamped) under :token, with its file's sha256 and text.
SELECT {schema}.record_apply(:version_table, :revision, :resource, :token, :holder, :method, :script_sha256, :source)

-- name: record_rollback
-- Remove the ledger row of a revision that was rolled back (or unstamped: :method 'stamp'), and log
-- who did it; :detail (JSON, or NULL) names the applied text whose downgrade() ran in place of the file's.
SELECT {schema}.record_rollback(:version_table, :revision, :resource, :token, :holder, :method, :detail)

-- name: record_steps
-- Apply or roll back several ledger rows in order; returns the transaction id.
SELECT {schema}.record_steps(:version_table, :resource, :token, :holder, :actions, :revisions, :methods, :shas, :sources, :details)

-- name: register_resource
-- Give :resource its advisory lock key unless it has one (see resource_lock_key in the fence schema),
-- in a transaction of its own before a run's first claim: a key registered by the claim itself is
-- not seen by a grant of another resource until the migration commits.
SELECT {schema}.resource_key(:resource)

-- name: require_applied_file
-- A --sql script's downgrade of :revision: stop (its transaction rolls back, nothing is rolled back)
-- unless the database applied the file whose downgrade() the script holds (sha256 :script_sha256),
-- or its ledger row records no sha256. Written only into scripts: run online, the runner compares.
DO $fencemigrate_check$
BEGIN
    IF EXISTS (SELECT 1 FROM {schema}.applied_revision
                WHERE version_table = :version_table AND revision = :revision
                  AND script_sha256 <> :script_sha256) THEN
        RAISE EXCEPTION 'fencemigrate: % was applied from another text than the file this script rolls it back with (sha256 %): nothing was rolled back', :revision, :script_sha256
              USING HINT = 'Roll it back with fencemigrate itself, which runs the downgrade() of the text as applied, or write the script again from that text (fencemigrate show ' || :revision || ' --applied > FILE).';
    END IF;
END
$fencemigrate_check$

-- name: schema_version
-- The installed fence schema version.
SELECT {schema}.schema_version()

-- name: script_grant
-- An offline script's own grant (the script_grant_function statement), when it runs: the token it was granted.
SELECT pg_temp.fencemigrate_script_grant(:resource, :holder, CAST(:ttl_ms AS bigint), CAST(:wait_ms AS bigint),
                                         :version_table, CAST(:heads AS text[]), :schema_version) AS granted_token

-- name: script_grant_function
-- The grant an offline (--sql) script written without --token takes when it runs, created by the
-- script in its own session (pg_temp: nothing is added to the database). The grant `fencemigrate
-- upgrade` takes itself (fencemigrate/leases/database.py), as plain SQL in one function:
--   1. the fence schema must be installed, at p_schema_version or later;
--   2. a live lease of another holder is waited for (at most p_wait_ms; a lease granted further in
--      the future than its TTL is implausible and counts as expired, as in the lease_lock statement), then the claim lock and the
--      fence row are locked (an in-flight migration is waited for, at most what is left of p_wait_ms);
--      a resource whose tokens come from Redis is refused;
--   3. the version table's rows must be exactly p_heads, the heads the script was written from (the
--      start of its range; none from base), else FENCED (FM001): the locks keep every other fenced
--      writer out until the script's transaction ends, and the lease until it is released;
--   4. the next token is issued as every grant issues it (next_grant_token(): epochs, see
--      fencemigrate/leases/epochs.py), the lease granted to p_holder for p_ttl_ms, the fence advanced
--      to the token, EXPIRE (an expired holder) and GRANT logged;
--   5. the token is kept in the session's temporary table fencemigrate_script_lease, which the
--      script's claims and ledger calls read it from (the script_token statement) and its release empties
--      (the script_release statement). A session that was granted nothing has no such table: every claim fails.
-- Each refusal raises an error (psql -v ON_ERROR_STOP=1 stops there) and leaves nothing changed.
CREATE OR REPLACE FUNCTION pg_temp.fencemigrate_script_grant(
    p_resource text, p_holder text, p_ttl_ms bigint, p_wait_ms bigint,
    p_version_table text, p_heads text[], p_schema_version text
) RETURNS bigint
LANGUAGE plpgsql
AS $fencemigrate_script$
DECLARE
    v_deadline    timestamptz := clock_timestamp() + p_wait_ms * interval '1 millisecond';
    v_timeout     text := current_setting('lock_timeout');
    v_installed   text;
    v_lease       record;
    v_fence       record;
    v_now         record;
    v_recorded    text;
    v_table       regclass;
    v_found       text[];
    v_wanted      text[];
    v_token       bigint;
    v_standby     boolean := current_setting('synchronous_standby_names') <> '';
    v_detail      jsonb;
BEGIN
    IF to_regprocedure('{schema}.schema_version()') IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = 'fencemigrate: the fence schema ({schema}) is not installed in this database: install it '
                      '(fencemigrate install, or fencemigrate install --sql | psql) and run the script again; '
                      'nothing was applied';
    END IF;
    v_installed := {schema}.schema_version();
    IF string_to_array(v_installed, '.')::int[] < string_to_array(p_schema_version, '.')::int[] THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = format('fencemigrate: the fence schema here is version %s, this script needs %s or later: '
                             'update it (fencemigrate install) and run the script again; nothing was applied',
                             v_installed, p_schema_version);
    END IF;

    INSERT INTO {schema}.lease (resource, token) VALUES (p_resource, 0) ON CONFLICT (resource) DO NOTHING;
    LOOP
        SELECT l.holder, l.token, l.granted_at, l.expires_at,
               l.expires_at <= clock_timestamp()
                   OR coalesce(l.granted_at > clock_timestamp() + l.ttl_ms * interval '1 millisecond', false) AS expired
          INTO v_lease
          FROM {schema}.lease l WHERE l.resource = p_resource;
        EXIT WHEN v_lease.holder IS NULL OR v_lease.expired;
        IF clock_timestamp() >= v_deadline THEN
            RAISE EXCEPTION USING ERRCODE = '55P03',
                MESSAGE = format('lease on %s is busy: held by %s (token %s) until %s; this is transient, try '
                                 'again later (the script waited %s ms for it); nothing was applied',
                                 p_resource, v_lease.holder, v_lease.token, v_lease.expires_at, p_wait_ms);
        END IF;
        PERFORM pg_sleep(least(0.2, greatest(extract(epoch FROM v_deadline - clock_timestamp()), 0.001)));
    END LOOP;

    BEGIN
        PERFORM set_config('lock_timeout',
                           greatest(ceil(extract(epoch FROM v_deadline - clock_timestamp()) * 1000), 1)::bigint || 'ms',
                           true);
        PERFORM pg_advisory_xact_lock({claim_lock_class}, {schema}.resource_key(p_resource));
        SELECT f.token, f.token_source, f.incarnation INTO v_fence
          FROM {schema}.agent_fence f WHERE f.resource = p_resource FOR UPDATE;
        SELECT l.holder, l.token, l.granted_at, l.expires_at,
               l.expires_at <= clock_timestamp()
                   OR coalesce(l.granted_at > clock_timestamp() + l.ttl_ms * interval '1 millisecond', false) AS expired,
               coalesce(l.granted_at > clock_timestamp() + l.ttl_ms * interval '1 millisecond', false) AS implausible
          INTO v_lease
          FROM {schema}.lease l WHERE l.resource = p_resource FOR UPDATE;
    EXCEPTION WHEN lock_not_available THEN
        RAISE EXCEPTION USING ERRCODE = '55P03',
            MESSAGE = format('lease on %s is busy: a migration under an older token is still in flight (its '
                             'holder''s lease has expired); this is transient, try again later (the script '
                             'waited %s ms for it); nothing was applied', p_resource, p_wait_ms);
    END;
    PERFORM set_config('lock_timeout', v_timeout, true);
    IF v_fence.token_source = 'redis' THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = format('fencemigrate: the tokens of %s come from Redis: a script takes its lease from the '
                             'database''s lease service only; write it with --token N from a Redis grant; '
                             'nothing was applied', p_resource);
    END IF;
    IF v_lease.holder IS NOT NULL AND NOT v_lease.expired THEN
        RAISE EXCEPTION USING ERRCODE = '55P03',
            MESSAGE = format('lease on %s is busy: held by %s (token %s) until %s; this is transient, try again '
                             'later; nothing was applied', p_resource, v_lease.holder, v_lease.token,
                             v_lease.expires_at);
    END IF;

    v_table := to_regclass(p_version_table);
    v_found := '{}';
    IF v_table IS NOT NULL THEN
        EXECUTE format('SELECT coalesce(array_agg(v.version_num::text ORDER BY v.version_num::text), ''{}'') '
                       'FROM %s v', v_table) INTO v_found;
    END IF;
    SELECT coalesce(array_agg(h ORDER BY h), '{}') INTO v_wanted FROM unnest(p_heads) h;
    IF v_found <> v_wanted THEN
        RAISE EXCEPTION USING ERRCODE = 'FM001',
            MESSAGE = format('FENCED: heads are %s, this script was written from %s (resource %s). This is NOT a '
                             'transient error: do not retry, rebase, renumber or re-apply; re-read the state and '
                             're-plan. Nothing was applied',
                             coalesce(nullif(array_to_string(v_found, ','), ''), 'base'),
                             coalesce(nullif(array_to_string(v_wanted, ','), ''), 'base'), p_resource),
            DETAIL = json_build_object('resource', p_resource, 'token', NULL, 'fence_token', v_fence.token,
                                       'reason', 'heads moved')::text;
    END IF;

    SELECT i.incarnation, i.timeline INTO v_now FROM {schema}.database_incarnation() i;
    SELECT p INTO v_recorded FROM unnest(string_to_array(v_fence.incarnation, '+')) p WHERE strpos(p, ':') = 0 LIMIT 1;
    v_token := {schema}.next_grant_token(greatest(v_lease.token, coalesce(v_fence.token, 0)), v_fence.incarnation);
    IF current_setting('synchronous_commit') = 'off'
       OR (v_standby AND current_setting('synchronous_commit') IN ('local', 'remote_write')) THEN
        PERFORM set_config('synchronous_commit', 'on', true);
    END IF;
    IF v_lease.implausible THEN  -- its holder's clock was ahead: let it go, so that the guard sees no live lease
        UPDATE {schema}.lease SET holder = NULL, ttl_ms = NULL, granted_at = NULL, expires_at = NULL
         WHERE resource = p_resource;
    END IF;
    UPDATE {schema}.lease
       SET holder = p_holder, token = v_token, ttl_ms = p_ttl_ms,
           replication = CASE WHEN v_standby THEN 'synchronous' ELSE 'asynchronous' END,
           granted_at = clock_timestamp(),
           expires_at = clock_timestamp() + p_ttl_ms * interval '1 millisecond'
     WHERE resource = p_resource;
    IF NOT {schema}.advance_fence(p_resource, v_token, 'lease service', v_now.incarnation) THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = format('the grant of token %s could not advance the fence of %s: a higher token has written '
                             'meanwhile; nothing was applied', v_token, p_resource);
    END IF;
    IF v_lease.holder IS NOT NULL AND v_lease.holder <> p_holder AND v_lease.implausible THEN  -- logged now
        PERFORM {schema}.log_event(NULL, p_resource, 'EXPIRE', v_lease.holder, v_lease.token, NULL,
                                   jsonb_build_object('implausible', true, 'granted_at', v_lease.granted_at,
                                                      'expires_at', v_lease.expires_at)::text);
    ELSIF v_lease.holder IS NOT NULL AND NOT v_lease.implausible THEN
        PERFORM {schema}.log_event(v_lease.expires_at, p_resource, 'EXPIRE', v_lease.holder, v_lease.token, NULL, NULL);
    END IF;
    v_detail := jsonb_build_object('ttl_ms', p_ttl_ms);
    IF v_recorded IS NOT NULL AND v_recorded <> v_now.incarnation THEN
        v_detail := v_detail || jsonb_build_object(
            'new_epoch', jsonb_build_object('last_grant_on', v_fence.incarnation, 'now_on', v_now.incarnation));
    END IF;
    PERFORM {schema}.log_event(NULL, p_resource, 'GRANT', p_holder, v_token, NULL, v_detail::text);

    CREATE TEMPORARY TABLE IF NOT EXISTS fencemigrate_script_lease (
        resource text NOT NULL, holder text NOT NULL, token bigint NOT NULL
    );
    DELETE FROM pg_temp.fencemigrate_script_lease;
    INSERT INTO pg_temp.fencemigrate_script_lease (resource, holder, token) VALUES (p_resource, p_holder, v_token);
    RETURN v_token;
END
$fencemigrate_script$

-- name: script_release
-- An offline script's release of its own lease (the script_grant_function statement), after its last revision,
-- in that revision's transaction: as the lease_release statement frees a lease, logged RELEASE as the lease
-- service logs it; wakes the runners waiting for the lease when the transaction commits. Nothing
-- when the lease is no longer the script's (the script's claims were FENCED before this).
WITH released AS (
    UPDATE {schema}.lease l
       SET holder = NULL, ttl_ms = NULL, granted_at = NULL, expires_at = NULL
      FROM pg_temp.fencemigrate_script_lease s
     WHERE l.resource = s.resource AND l.holder = s.holder AND l.token = s.token
    RETURNING l.resource, s.holder, l.token
)
SELECT r.token AS released_token,
       {schema}.log_event(NULL, r.resource, 'RELEASE', r.holder, r.token, NULL, NULL) AS logged,
       pg_notify('fencemigrate_lease', r.resource) AS woken
  FROM released r

-- name: script_token
-- The token an offline script was granted when it ran (the script_grant_function statement), read in its own
-- session where its claims and ledger calls take a token: an expression, not a statement. No such
-- table (nothing was granted in this session): the statement fails; no row: claim() refuses NULL.
(SELECT s.token FROM pg_temp.fencemigrate_script_lease s)

-- name: seed_granted_fence
-- The first grant of a resource never claimed: its fence row, at the :token its lease service
-- (:source) issued under the database's :incarnation. 0 rows when the row exists (the grant_fence statement's
-- advance_fence() seeds it already: this finds it there).
SELECT advanced FROM {schema}.advance_fence(:resource, CAST(:token AS bigint), :source, :incarnation) AS advanced
 WHERE advanced

-- name: settle_revision
-- `fencemigrate resolve REV --as applied`: the dirty row of :revision is settled as applied.
UPDATE {schema}.applied_revision
   SET state = 'applied', state_token = NULL, state_holder = NULL, state_since = NULL
 WHERE version_table = :version_table AND revision = :revision AND state <> 'applied'

-- name: synchronous_grant
-- A grant commits durably whatever its session says, for its own transaction only (any role may
-- set these, e.g. in PGOPTIONS or ALTER ROLE ... SET):
-- * synchronous_commit 'off' would let a crash lose a grant already reported (the restarted server,
--   on the same incarnation, would issue its token again): raised to 'on';
-- * with synchronous standbys, 'local' or 'remote_write' would let a promoted standby that never
--   received the grant issue its token again: raised to 'on' (the standby has flushed it); 'on'
--   and 'remote_apply' are kept;
-- * client_min_messages 'error' would hide the WARNING that says the COMMIT stopped waiting for a
--   standby before one confirmed it: lowered to 'warning'.
-- Returns whether the grant's COMMIT waits for a standby.
SELECT current_setting('synchronous_standby_names') <> '' AS waits_for_standby,
       CASE WHEN current_setting('synchronous_commit') = 'off'
              OR (current_setting('synchronous_standby_names') <> ''
                  AND current_setting('synchronous_commit') IN ('local', 'remote_write'))
            THEN set_config('synchronous_commit', 'on', true)
       END AS synchronous_commit,
       CASE WHEN current_setting('client_min_messages') = 'error'
            THEN set_config('client_min_messages', 'warning', true)
       END AS client_min_messages

-- name: terminate_writer
-- --preempt while a run waits for the fence: end the session :pid, a writer under an older token that
-- holds it (its transaction rolls back completely), waiting up to :wait_ms for it to exit.
SELECT pg_terminate_backend(:pid, :wait_ms)

-- name: timeline_events
-- The event log for `fencemigrate timeline`, oldest first: every resource, or only :resource;
-- from :since_at on, or from :since_ms milliseconds ago by the database's clock (NULL: no limit).
SELECT id, at, resource, kind, holder, token, revision, detail
  FROM {schema}.fence_event
 WHERE (CAST(:resource AS text) IS NULL OR resource = CAST(:resource AS text))
   AND (CAST(:since_at AS timestamptz) IS NULL OR at >= CAST(:since_at AS timestamptz))
   AND (CAST(:since_ms AS bigint) IS NULL
        OR at >= clock_timestamp() - CAST(:since_ms AS bigint) * interval '1 millisecond')
 ORDER BY at, id

-- name: token_sources
-- Where each fenced resource's tokens come from ('external', 'lease service', 'redis').
SELECT resource, token_source FROM {schema}.agent_fence

-- name: token_wrote
-- Has :token written to :resource (applied, stamped, rolled back or resolved a revision)? A FENCED
-- message says "has since written" only then: a grant advances the fence before its holder writes.
SELECT EXISTS (
    SELECT 1
      FROM {schema}.fence_event
     WHERE resource = :resource
       AND token = :token
       AND kind IN ('APPLY', 'STAMP', 'ROLLBACK', 'UNSTAMP', 'RESOLVE')
) AS wrote

-- name: undo_record
-- Take back the ledger row and the COMMIT check of claim_and_record.
SELECT {schema}.undo_record(:version_table, :revision)

-- name: unexplained_tokens
-- Token counters that no recorded grant explains: a lease row's counter, or the fence token of a
-- resource whose tokens come from a lease service, with no GRANT event of that token (every grant
-- logs one in its own transaction, see the lease guard). Only a write behind the lease service's
-- back leaves this; a counter raised so is where every later grant starts (kind: 'lease', 'fence').
SELECT 'lease' AS kind, l.resource, l.token, NULL AS token_source
  FROM {schema}.lease l
 WHERE l.token > 0
   AND NOT EXISTS (SELECT 1 FROM {schema}.fence_event e
                    WHERE e.resource = l.resource AND e.kind = 'GRANT' AND e.token = l.token)
UNION ALL
SELECT 'fence' AS kind, f.resource, f.token, f.token_source
  FROM {schema}.agent_fence f
 WHERE f.token_source <> 'external'
   AND NOT EXISTS (SELECT 1 FROM {schema}.fence_event e
                    WHERE e.resource = f.resource AND e.kind = 'GRANT' AND e.token = f.token)
 ORDER BY resource, kind DESC

-- name: unsettled_revisions
-- The dirty revisions of :resource: ledger rows whose DDL started in pre-check mode and never
-- finished ('applying' or 'rolling_back'), oldest first.
SELECT version_table, revision, state, state_token, state_holder, state_since
  FROM {schema}.applied_revision
 WHERE resource = :resource AND state <> 'applied'
 ORDER BY state_since, revision

-- name: version_guard_state
-- How writes without a token are treated on the version table :relation (ledger name
-- :version_table): allowed (opted out, since when), guarded (the trigger is on it).
SELECT (SELECT a.allowed_at FROM {schema}.tokenless_writes_allowed a
         WHERE a.version_table = :version_table) AS allowed_at,
       EXISTS (SELECT 1 FROM pg_trigger t
                WHERE t.tgrelid = to_regclass(:relation) AND t.tgname = 'fencemigrate_no_tokenless_write'
                  AND t.tgenabled <> 'D') AS guarded

-- name: version_table_owner
-- `fencemigrate install --grant-to ROLE`: Alembic's version table :relation when the owner of the
-- fence schema :quoted_schema (the installing role, before it is installed) does not own it (no row
-- otherwise): its owner, whether the installing role may give it to the fence's owner, and the
-- statement that does. Whoever owns the table can drop its guard trigger.
WITH fence AS (
    SELECT coalesce((SELECT n.nspowner FROM pg_namespace n WHERE n.nspname = (parse_ident(:quoted_schema))[1]),
                    (SELECT r.oid FROM pg_roles r WHERE r.rolname = current_user)) AS owner
)
SELECT c.relowner::regrole::text AS owner,
       pg_has_role(current_user, c.relowner, 'USAGE') AND pg_has_role(current_user, f.owner, 'USAGE') AS can_take,
       format('ALTER TABLE %s OWNER TO %I', c.oid::regclass, f.owner::regrole::text) AS statement
  FROM pg_class c, fence f
 WHERE c.oid = to_regclass(:relation)
   AND c.relowner <> f.owner

-- The named statements SQLite and MySQL/MariaDB share word for word (their fence tables are named
-- <schema>_<table> beside the application's): the runner looks a name up in sqlite.sql or mysql.sql
-- first, then here; no name is in both. Same format as those files.

-- name: applied_token
-- The token that applied :revision (no row if no fenced run recorded it).
SELECT applied_token FROM {schema}_applied_revision
 WHERE version_table = :version_table AND revision = :revision

-- name: apply_order
-- Where each revision's latest APPLY or STAMP event sits in the event log, per resource. Events are
-- numbered in the order they were logged, each in the transaction that wrote its ledger row, so
-- this orders the ledger rows that share an applied_at (one transaction's, or one clock tick's).
SELECT resource, revision, max(id) AS seq
  FROM {schema}_fence_event
 WHERE kind IN ('APPLY', 'STAMP')
   AND revision IS NOT NULL
 GROUP BY resource, revision

-- name: autocommit_fenced
-- FENCED runs whose revision had run statements in an autocommit block (committed on their own,
-- outside the fenced transaction, so possibly left applied): `fencemigrate state` names them.
SELECT at, resource, holder, token, detail
  FROM {schema}_fence_event
 WHERE kind = 'FENCED' AND detail LIKE '%"autocommitted"%'
 ORDER BY at, id

-- name: detach_fence
-- `lease detach`: :resource takes external tokens (--token) above its fence token from now on.
-- 0 rows: it has no fence row.
UPDATE {schema}_agent_fence SET token_source = 'external' WHERE resource = :resource

-- name: fence_below_lease
-- Resources whose fence token is below the last token the built-in lease service issued (or
-- that have no fence row although a token was issued): every grant advances the fence to its
-- token in the same transaction, so only a lowered or deleted fence row leaves this.
SELECT l.resource, f.token AS fence_token, l.token AS lease_token
  FROM {schema}_lease l
  LEFT JOIN {schema}_agent_fence f ON f.resource = l.resource
 WHERE l.token > 0 AND (f.token IS NULL OR f.token < l.token)
 ORDER BY l.resource

-- name: fence_rows
-- Every fenced resource and the highest token that has written to it.
SELECT resource, token, updated_at FROM {schema}_agent_fence ORDER BY resource

-- name: fence_source
-- The fence token of :resource and where its tokens come from ('external', 'lease service',
-- 'redis'); no row: never claimed nor granted.
SELECT token, token_source FROM {schema}_agent_fence WHERE resource = :resource

-- name: fence_token
-- The highest token that has written to :resource (no row if none has).
SELECT token FROM {schema}_agent_fence WHERE resource = :resource

-- name: forbid_tokenless_writes
-- Opt back in: forget the opt-out of :version_table (its triggers are created again too).
DELETE FROM {schema}_tokenless_writes_allowed WHERE version_table = :version_table

-- name: ledger_above_fence
-- Ledger rows no fenced run can leave: applied under a token above the fence token of their
-- resource, or with no fence row at all (every write claims the fence first, and the fence never
-- goes down). Only a lowered or deleted fence row, the guard triggers switched off, leaves them.
-- Adopted rows (method 'adopt', token 0: applied before fencing) claim nothing: left out.
SELECT a.version_table, a.revision, a.resource, a.applied_token, f.token AS fence_token
  FROM {schema}_applied_revision a
  LEFT JOIN {schema}_agent_fence f ON f.resource = a.resource
 WHERE a.method <> 'adopt' AND (f.token IS NULL OR a.applied_token > f.token)
 ORDER BY a.version_table, a.revision

-- name: record_rollback
-- Remove the ledger row of a revision that was rolled back.
DELETE FROM {schema}_applied_revision WHERE version_table = :version_table AND revision = :revision

-- name: token_sources
-- Where each fenced resource's tokens come from ('external', 'lease service', 'redis').
SELECT resource, token_source FROM {schema}_agent_fence

-- name: token_wrote
-- Has :token written to :resource (applied, stamped, rolled back or resolved a revision)? A FENCED
-- message says "has since written" only then: a grant advances the fence before its holder writes.
SELECT EXISTS (
    SELECT 1
      FROM {schema}_fence_event
     WHERE resource = :resource
       AND token = :token
       AND kind IN ('APPLY', 'STAMP', 'ROLLBACK', 'UNSTAMP', 'RESOLVE')
) AS wrote

-- name: unexplained_tokens
-- Token counters that no recorded grant explains: a lease row's counter, or the fence token of a
-- resource whose tokens come from a lease service, with no GRANT event of that token (every grant
-- logs one in its own transaction, see the lease guard). Only a write behind the lease service's
-- back leaves this; a counter raised so is where every later grant starts (kind: 'lease', 'fence').
SELECT 'lease' AS kind, l.resource, l.token, NULL AS token_source
  FROM {schema}_lease l
 WHERE l.token > 0
   AND NOT EXISTS (SELECT 1 FROM {schema}_fence_event e
                    WHERE e.resource = l.resource AND e.kind = 'GRANT' AND e.token = l.token)
UNION ALL
SELECT 'fence' AS kind, f.resource, f.token, f.token_source
  FROM {schema}_agent_fence f
 WHERE f.token_source <> 'external'
   AND NOT EXISTS (SELECT 1 FROM {schema}_fence_event e
                    WHERE e.resource = f.resource AND e.kind = 'GRANT' AND e.token = f.token)
 ORDER BY resource, kind DESC

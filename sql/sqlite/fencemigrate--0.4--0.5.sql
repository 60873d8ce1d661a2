-- fencemigrate 0.4 -> 0.5 on SQLite: direct SQL cannot forge a grant or an unissued token.
--
-- The runner applies this file, one statement at a time, inside a fenced run's own transaction:
-- on a database at 0.4 (a fresh install runs the current version's full script instead).

-- == The lease guard ==
-- The same rules as PostgreSQL's lease_grant_guard() and agent_fence_source_guard()
-- (sql/fencemigrate--0.4--0.5.sql), one trigger each (SQLite's RAISE takes a fixed message, every
-- one starting 'lease guard: '). A lease is live while it has a holder and expires_at is after
-- strftime('%Y-%m-%dT%H:%M:%fZ', 'now'): SQLite's clock, the clock of whichever machine writes the
-- file, the same one the lease service judges leases by (see README, SQLite). A token that is not
-- an integer from 1 to 2^62 is the token domain triggers' to refuse (0.4), a lower one the monotonic
-- guard's (0.2): these triggers leave both alone.

-- lease: a token is never handed to another holder; a new token goes to another holder only when
-- the old lease is no longer live; a grant's token is above the fence token.
CREATE TRIGGER IF NOT EXISTS @extschema@_lease_token_keeps_its_holder
BEFORE UPDATE ON @extschema@_lease
FOR EACH ROW WHEN NEW.token = OLD.token AND NEW.holder IS NOT NULL AND NEW.holder IS NOT OLD.holder
BEGIN
    SELECT RAISE(ABORT, 'lease guard: this token was issued to another holder or released: a new holder needs a new token, which only a grant issues');
END;

CREATE TRIGGER IF NOT EXISTS @extschema@_lease_no_stolen_grant
BEFORE UPDATE ON @extschema@_lease
FOR EACH ROW WHEN NEW.token > OLD.token AND OLD.holder IS NOT NULL AND NEW.holder IS NOT OLD.holder
                  AND OLD.expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now')
BEGIN
    SELECT RAISE(ABORT, 'lease guard: the lease is held by another holder until it expires: only a grant gives it to another holder, once it is released or has expired');
END;

CREATE TRIGGER IF NOT EXISTS @extschema@_lease_grant_above_fence
BEFORE UPDATE ON @extschema@_lease
FOR EACH ROW WHEN typeof(NEW.token) = 'integer' AND NEW.token <= 4611686018427387904 AND NEW.token > OLD.token AND NEW.holder IS NOT NULL
                  AND NEW.token <= (SELECT f.token FROM @extschema@_agent_fence f WHERE f.resource = NEW.resource)
BEGIN
    SELECT RAISE(ABORT, 'lease guard: a grant issues a token above the fence token');
END;

-- INSERT OR REPLACE deletes the row it replaces without firing delete triggers: a lease row is
-- changed by UPDATE (lease_seed.sql inserts only a missing row; a lower token is the monotonic
-- guard's to refuse).
CREATE TRIGGER IF NOT EXISTS @extschema@_lease_no_replace
BEFORE INSERT ON @extschema@_lease
FOR EACH ROW WHEN typeof(NEW.token) = 'integer' AND NEW.token <= 4611686018427387904
                  AND EXISTS (SELECT 1 FROM @extschema@_lease l
                              WHERE l.resource = NEW.resource AND l.token <= NEW.token)
BEGIN
    SELECT RAISE(ABORT, 'lease guard: a lease row is never replaced: a grant, renew or release updates it');
END;

CREATE TRIGGER IF NOT EXISTS @extschema@_lease_insert_above_fence
BEFORE INSERT ON @extschema@_lease
FOR EACH ROW WHEN typeof(NEW.token) = 'integer' AND NEW.token <= 4611686018427387904 AND NEW.holder IS NOT NULL
                  AND NEW.token <= (SELECT f.token FROM @extschema@_agent_fence f WHERE f.resource = NEW.resource)
BEGIN
    SELECT RAISE(ABORT, 'lease guard: a grant issues a token above the fence token');
END;

-- agent_fence: while a resource takes its tokens from the built-in lease service, its fence token
-- is at most the last token that service issued, and it leaves the service only while no lease
-- on it is live. 'redis': nothing the database can check.
CREATE TRIGGER IF NOT EXISTS @extschema@_agent_fence_no_unissued_token
BEFORE UPDATE ON @extschema@_agent_fence
FOR EACH ROW WHEN typeof(NEW.token) = 'integer' AND NEW.token <= 4611686018427387904 AND NEW.token_source = 'lease service'
                  AND NEW.token >= OLD.token AND (NEW.token > OLD.token OR OLD.token_source <> 'lease service')
                  AND NEW.token > coalesce((SELECT l.token FROM @extschema@_lease l WHERE l.resource = NEW.resource), 0)
BEGIN
    SELECT RAISE(ABORT, 'lease guard: this fence token is above the last token the lease service issued: it was never issued');
END;

CREATE TRIGGER IF NOT EXISTS @extschema@_agent_fence_insert_unissued_token
BEFORE INSERT ON @extschema@_agent_fence
FOR EACH ROW WHEN typeof(NEW.token) = 'integer' AND NEW.token <= 4611686018427387904 AND NEW.token_source = 'lease service'
                  AND NEW.token > coalesce((SELECT l.token FROM @extschema@_lease l WHERE l.resource = NEW.resource), 0)
BEGIN
    SELECT RAISE(ABORT, 'lease guard: this fence token is above the last token the lease service issued: it was never issued');
END;

CREATE TRIGGER IF NOT EXISTS @extschema@_agent_fence_no_live_detach
BEFORE UPDATE ON @extschema@_agent_fence
FOR EACH ROW WHEN OLD.token_source = 'lease service' AND NEW.token_source <> 'lease service'
                  AND EXISTS (SELECT 1 FROM @extschema@_lease l
                               WHERE l.resource = OLD.resource AND l.holder IS NOT NULL
                                 AND l.expires_at > strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
BEGIN
    SELECT RAISE(ABORT, 'lease guard: the lease of this resource is live: its fence cannot leave the lease service while that lease is live');
END;

-- A fence row of the lease service's is never replaced either (INSERT OR REPLACE would take it
-- back to 'external' behind a live lease); the claim's seed_fence.sql inserts only a missing row.
CREATE TRIGGER IF NOT EXISTS @extschema@_agent_fence_no_replace_leased
BEFORE INSERT ON @extschema@_agent_fence
FOR EACH ROW WHEN typeof(NEW.token) = 'integer' AND NEW.token <= 4611686018427387904
                  AND EXISTS (SELECT 1 FROM @extschema@_agent_fence f
                          WHERE f.resource = NEW.resource AND f.token <= NEW.token
                            AND f.token_source = 'lease service')
BEGIN
    SELECT RAISE(ABORT, 'lease guard: a fence row of the lease service is never replaced: a grant or lease detach updates it');
END;
-- == end of the lease guard ==

UPDATE @extschema@_schema_version SET version = '0.5' WHERE one_row = 1;

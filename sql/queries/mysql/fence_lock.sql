-- The fence token of :resource for a grant, row locked until it commits (no row: never claimed).
-- The grant holds the resource's named lock already, so no pre-check writer is in flight.
SELECT token FROM {schema}_agent_fence WHERE resource = :resource FOR UPDATE

-- The lease row of :resource, created free with its token counter at 0 on first use (0 rows when
-- it exists). Not ON CONFLICT DO NOTHING: the monotonic guard's BEFORE INSERT trigger would refuse
-- an insert of token 0 beside an existing row before the conflict is seen.
INSERT INTO {schema}_lease (resource, token)
SELECT :resource, 0
 WHERE NOT EXISTS (SELECT 1 FROM {schema}_lease WHERE resource = :resource)

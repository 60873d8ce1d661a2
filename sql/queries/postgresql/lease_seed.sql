-- The lease row of :resource, created free with its token counter at 0 on first use.
INSERT INTO {schema}.lease (resource, token) VALUES (:resource, 0) ON CONFLICT (resource) DO NOTHING

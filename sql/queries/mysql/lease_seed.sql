-- The lease row of :resource, created free with its token counter at 0 on first use (changes
-- nothing when it exists: the no-op update keeps the token, which the monotonic guard allows).
INSERT INTO {schema}_lease (resource, token) VALUES (:resource, 0)
ON DUPLICATE KEY UPDATE token = token

-- FENCED runs whose revision had run statements in an autocommit block (committed on their own,
-- outside the fenced transaction, so possibly left applied): `fencemigrate state` names them.
SELECT at, resource, holder, token, detail
  FROM {schema}_fence_event
 WHERE kind = 'FENCED' AND detail LIKE '%"autocommitted"%'
 ORDER BY at, id

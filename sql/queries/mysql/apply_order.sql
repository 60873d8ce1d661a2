-- Where each revision's latest APPLY or STAMP event sits in the event log, per resource. Events are
-- numbered in the order they were logged, each in the transaction that wrote its ledger row, so
-- this orders the ledger rows that share an applied_at (one transaction's, or one clock tick's).
SELECT resource, revision, max(id) AS seq
  FROM {schema}_fence_event
 WHERE kind IN ('APPLY', 'STAMP')
   AND revision IS NOT NULL
 GROUP BY resource, revision

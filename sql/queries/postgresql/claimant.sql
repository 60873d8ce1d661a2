-- Once the claim is taken: lock_timeout back to what it was, and this transaction named for those who
-- wait behind it (fence_holders.sql reads it): 'fencemigrate token <n> <holder>', cut to PostgreSQL's
-- 63 bytes. Both are local to the transaction: they end with it.
SELECT set_config('lock_timeout', :lock_timeout, true), set_config('application_name', :application_name, true)

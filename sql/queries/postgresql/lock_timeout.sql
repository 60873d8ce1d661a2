-- Bound every lock wait of this transaction (milliseconds, as text).
SELECT set_config('lock_timeout', :timeout_ms, true)

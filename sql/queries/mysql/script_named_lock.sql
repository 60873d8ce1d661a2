-- A --sql script's named lock of :resource (named_lock_name.sql), the one pre-check runs hold for
-- their whole run, waiting at most :wait_s seconds (--wait): fencemigrate writers and grants never
-- overlap with the script, and the version table's guard lets the script's version writes through.
SET @fencemigrate_refusal = IF(
    GET_LOCK((SELECT IF(CHAR_LENGTH(n.name) <= 64, n.name, CONCAT('fencemigrate:', SHA1(n.name)))
                FROM (SELECT CONCAT('fencemigrate:', DATABASE(), '/', :resource) AS name) n), :wait_s) = 1,
    NULL,
    CONCAT('busy: another fencemigrate run on ', :resource, ' held its named lock for ', :wait_s,
           ' s (--wait): a migration in flight (fencemigrate state shows it); this is transient, try again ',
           'later; nothing was applied'))

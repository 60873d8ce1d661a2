-- A --sql script that takes its own lease: the named lock every lease transaction on :resource
-- takes first (lease_lock_name.sql), waiting at most :wait_s seconds (--wait), as a grant does.
SET @fencemigrate_refusal = IF(
    GET_LOCK((SELECT IF(CHAR_LENGTH(n.name) <= 64, n.name, CONCAT('fencemigrate-lease:', SHA1(n.name)))
                FROM (SELECT CONCAT('fencemigrate-lease:', DATABASE(), '/', :resource) AS name) n), :wait_s) = 1,
    NULL,
    CONCAT('lease on ', :resource, ' is busy: another grant, renew or release of it did not finish within ',
           :wait_s, ' s (--wait); this is transient, try again later; nothing was applied'))

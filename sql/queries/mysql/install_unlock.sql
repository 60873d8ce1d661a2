-- Release the install lock taken by install_lock.sql.
SELECT RELEASE_LOCK(CONCAT('fencemigrate-install:', DATABASE()))

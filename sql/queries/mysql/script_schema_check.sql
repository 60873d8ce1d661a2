-- A --sql script's first check: the fence schema must be installed at version :major.:minor or
-- later. The refusal is set first and cleared only by a read that finds the version: without the
-- fence schema (or its script_refusal table, older than 0.8) the statements that need it fail, and
-- the refusal stays. The token the script writes under starts unknown (NULL: every claim refuses it).
SET @fencemigrate_token = NULL;
SET @fencemigrate_refusal = CONCAT('fencemigrate: the fence schema is not installed in this database, or is older ',
                                   'than this script needs (', :major, '.', :minor, '): install it (fencemigrate ',
                                   'install) and run the script again; nothing was applied');
SET @fencemigrate_refusal = COALESCE(
    (SELECT IF(CAST(SUBSTRING_INDEX(v.version, '.', 1) AS UNSIGNED) * 1000000
               + CAST(SUBSTRING_INDEX(v.version, '.', -1) AS UNSIGNED) >= :major * 1000000 + :minor,
               '', @fencemigrate_refusal)
       FROM {schema}_schema_version v
      WHERE v.one_row = 1),
    @fencemigrate_refusal);
SET @fencemigrate_refusal = NULLIF(@fencemigrate_refusal, '')

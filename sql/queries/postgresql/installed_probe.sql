-- Whether the fence schema is installed: the name of schema_version() or NULL.
SELECT to_regprocedure(:function_name)::text

# Alembic configuration written by `fencemigrate init`.

[alembic]
# Where the migration environment (env.py, versions/) lives; %(here)s is this file's folder.
script_location = ${script_location}

# Prepended to sys.path, so env.py can import your models.
prepend_sys_path = .

# Separator for the path lists above (os = the operating system's own).
path_separator = os

# The database to migrate: a SQLite file next to this one to start with. Fencing works on
# SQLite, PostgreSQL and MySQL/MariaDB, e.g.
#   postgresql+psycopg://user:password@localhost/dbname
#   mysql+pymysql://user:password@localhost/dbname
sqlalchemy.url = sqlite:///%(here)s/database.sqlite

# fencemigrate: the fenced resource name (default db/migrations) and the schema
# the fence tables live in (default fencemigrate).
# fencemigrate_resource = db/migrations
# fencemigrate_schema = fencemigrate

[loggers]
keys = root,sqlalchemy,alembic

[handlers]
keys = console

[formatters]
keys = generic

[logger_root]
level = WARNING
handlers = console
qualname =

[logger_sqlalchemy]
level = WARNING
handlers =
qualname = sqlalchemy.engine

[logger_alembic]
level = INFO
handlers =
qualname = alembic

[handler_console]
class = StreamHandler
args = (sys.stderr,)
level = NOTSET
formatter = generic

[formatter_generic]
format = %(levelname)-5.5s [%(name)s] %(message)s
datefmt = %H:%M:%S

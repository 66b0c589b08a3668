"""Every generated statement, run on real databases: PostgreSQL (psycopg 3), MariaDB (PyMySQL) and
SQLite files.

The tests drive the generated functions the way a worker does (claim, settle, commit) and look at
the table from a fresh connection, as another process would. Time is explicit (`now` is T0 plus
some seconds); nothing waits for the clock. Helpers live in tests/dbcases.py, one file per
subject.
"""

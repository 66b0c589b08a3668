"""Every generated statement run on real databases (PostgreSQL, MariaDB, SQLite), driven the way a
worker drives it; the helpers are in tests/dbcases.py."""

"""Tests of the pure parts: no database, no server, no generated module on disk.

Nothing here may need a fixture of tests/conftest.py beyond pytest's own (no pg_dsn, mysql_url,
sqlite_path): a test that needs a database belongs in one of the other folders.
"""

"""The runtime on real databases: workers, handlers, claim forms, processes, drivers and backends,
connection settings and outages."""

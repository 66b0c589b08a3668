"""The operations commands (`inboxgen status`, `requeue`, `prune`): a live database and the
committed generated modules, running only the modules' own statements."""

"""The commands users run on a project: status, requeue, prune, verify, asyncapi, the worker
command on the service's own code, and the example services."""

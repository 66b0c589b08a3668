"""The generator: spec and DDL checks, rendered modules (golden and negative cases, fuzzing), real
DDL and role names, the generated code as a user's tooling sees it, the public API and the docs."""

#!/usr/bin/env bash
# Run the whole test suite on a fresh Debian machine (as root). Extra args go to pytest.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
    echo "test.sh: PostgreSQL server binaries not found; installing 'postgresql'" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    # The package may create/start its own cluster on 5432; our tests start private servers.
    apt-get install -y --no-install-recommends postgresql
fi

export PIP_ROOT_USER_ACTION=ignore
python3 -m pip install -q -e '.[dev]'

rc=0
python3 -m pytest -q "$@" || rc=$?
if [ "$rc" -eq 5 ]; then
    echo "test.sh: pytest collected no tests; treating as failure" >&2
fi
exit "$rc"

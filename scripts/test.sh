#!/usr/bin/env bash
# Run the whole test suite on a fresh Debian machine (as root). Extra args go to pytest.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The tests start private servers of their own (PostgreSQL and PgBouncer as the postgres user,
# MariaDB in a temporary folder); here we only make sure the server binaries are installed.
missing=()
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] || missing+=(mariadb-server)
[ -x /usr/sbin/pgbouncer ] || command -v pgbouncer >/dev/null || missing+=(pgbouncer)
# libfaketime runs workers on hosts whose clocks are off (tests/runtime/test_clock_skew.py).
compgen -G '/usr/lib/*/faketime/libfaketimeMT.so.1' >/dev/null || missing+=(faketime)
if [ "${#missing[@]}" -gt 0 ]; then
    echo "test.sh: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends "${missing[@]}"
fi

export PIP_ROOT_USER_ACTION=ignore
python3 -m pip install -q -e '.[dev]'

rc=0
python3 -m pytest -q "$@" || rc=$?
if [ "$rc" -eq 5 ]; then
    echo "test.sh: pytest collected no tests; treating as failure" >&2
fi
exit "$rc"

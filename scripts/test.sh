#!/usr/bin/env bash
# Run the whole test suite on a fresh Debian machine (as root). Extra args go to pytest.
#
# Python packages go into virtual environments inside the clone, made here when missing: .venv
# (inboxgen and its test dependencies, under python3) and, when python3 is older than 3.12,
# .venv-django6 (the same under a newer Python, for Django 6's task framework). Nothing is
# installed into the Python that runs this script, and nothing is left outside the clone.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The tests start private servers of their own (PostgreSQL and PgBouncer as the postgres user,
# MariaDB in a temporary folder); here we only make sure the server binaries are installed.
missing=()
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] || missing+=(mariadb-server)
# A two-node Galera cluster (tests/galera_cluster.py): its provider, and rsync for the state
# transfer of a joining node (both are dependencies of Debian's mariadb-server as well).
compgen -G '/usr/lib/*galera*/libgalera_smm.so' >/dev/null || [ -f /usr/lib/libgalera_smm.so ] \
    || missing+=(galera-4)
command -v rsync >/dev/null || missing+=(rsync)
[ -x /usr/sbin/pgbouncer ] || command -v pgbouncer >/dev/null || missing+=(pgbouncer)
# libfaketime runs workers on hosts whose clocks are off (tests/runtime/test_clock_skew.py).
compgen -G '/usr/lib/*/faketime/libfaketimeMT.so.1' >/dev/null || missing+=(faketime)
# The dashboard's browser test (tests/ops/test_dashboard.py) drives Debian's headless Chromium.
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
# Debian's python3 makes virtual environments only with python3-venv (ensurepip) installed.
python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
if [ "${#missing[@]}" -gt 0 ]; then
    echo "test.sh: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends "${missing[@]}"
fi

# venv FOLDER PYTHON: make the virtual environment FOLDER with PYTHON (again, when the one there
# no longer runs), and install inboxgen (editable) with its test dependencies into it.
venv() {
    if ! "$1/bin/python" -c '' 2>/dev/null; then
        echo "test.sh: making the virtual environment $1 ($("$2" --version 2>&1))" >&2
        "$2" -m venv --clear "$1"
    fi
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$1/bin/python" -m pip install -q -e '.[dev]'
}

venv .venv python3
rc=0
.venv/bin/python -m pytest -q "$@" || rc=$?
if [ "$rc" -eq 5 ]; then
    echo "test.sh: pytest collected no tests; treating as failure" >&2
fi

# Django's task framework (tests/django_tasks) needs Django 6, which needs Python 3.12 or newer:
# when python3 is older, those tests run in .venv-django6, under a newer Python. They run with
# the whole suite (no arguments), not when pytest is given what to run.
if [ "$#" -eq 0 ] && ! .venv/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 12))'
then
    newer=""
    for candidate in python3.14 python3.13 python3.12 \
            "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python3; do
        # (A pyenv shim answers `command -v` for a version that is not selected, then fails.)
        if command -v "$candidate" >/dev/null 2>&1 \
                && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null
        then
            newer="$candidate"
            break
        fi
    done
    if [ -z "$newer" ]; then
        echo "test.sh: tests/django_tasks need Python 3.12 or newer (Django 6); none found" >&2
        exit 1
    fi
    venv .venv-django6 "$newer"
    django_rc=0
    .venv-django6/bin/python -m pytest -q tests/django_tasks || django_rc=$?
    [ "$rc" -ne 0 ] || rc=$django_rc
fi
exit "$rc"

"""`inboxgen verify`: the CI check that generated modules match their specs and the DDL."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "inboxgen", *args], cwd=cwd,
                          capture_output=True, text=True, check=False)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the example project, built: verify starts clean."""
    shutil.copytree(REPO / "specs", tmp_path / "specs")
    (tmp_path / "pyproject.toml").write_text(
        '[tool.inboxgen]\nspecs = "specs"\nout = "generated"\n', encoding="utf-8")
    built = run(tmp_path, "build")
    assert built.returncode == 0, built.stderr
    return tmp_path


def test_the_repository_itself_verifies_clean() -> None:
    result = run(REPO, "verify")
    assert result.returncode == 0, result.stderr + result.stdout
    assert "up to date" in result.stdout


def test_clean_tree_exits_0(project: Path) -> None:
    result = run(project, "verify")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("verified 9 module(s): up to date")


def test_changed_module_is_reported_with_a_diff(project: Path) -> None:
    module = project / "generated" / "reports.py"
    module.write_text(module.read_text().replace('ORDER BY "id"', 'ORDER BY "id" DESC'))
    result = run(project, "verify")
    assert result.returncode == 1
    assert ("generated/reports.py: stale: differs from what its spec generates "
            "(run inboxgen build)") in result.stderr
    assert '-    ORDER BY "id" DESC' in result.stdout
    assert '+    ORDER BY "id"' in result.stdout


def test_missing_module_is_reported(project: Path) -> None:
    (project / "generated" / "mailer.py").unlink()
    result = run(project, "verify")
    assert result.returncode == 1
    assert ("generated/mailer.py: missing: its spec generates it but it is not on disk "
            "(run inboxgen build)") in result.stderr


def test_extra_module_with_the_header_is_reported_and_other_files_are_not(project: Path) -> None:
    (project / "specs" / "mailer.toml").unlink()
    (project / "generated" / "helpers.py").write_text("# hand-written, no header\n")
    result = run(project, "verify")
    assert result.returncode == 1
    assert ("generated/mailer.py: extra: carries the inboxgen header but no spec generates it "
            "(delete it, or restore its spec)") in result.stderr
    assert "helpers.py" not in result.stderr


def test_column_added_to_the_ddl_makes_the_module_stale(project: Path) -> None:
    migration = project / "specs" / "migrations" / "reports" / "0002_add_owner.sql"
    migration.write_text("ALTER TABLE report_jobs ADD COLUMN owner TEXT;\n")
    result = run(project, "verify")
    assert result.returncode == 1
    assert "generated/reports.py: stale" in result.stderr
    assert "+    owner: str | None" in result.stdout


def test_role_column_dropped_from_the_ddl_fails_the_check(project: Path) -> None:
    migration = project / "specs" / "migrations" / "reports" / "0002_drop_lease.sql"
    migration.write_text("ALTER TABLE report_jobs DROP COLUMN locked_until;\n")
    result = run(project, "verify")
    assert result.returncode == 1
    assert ('specs/reports.toml:10: column "report_jobs.locked_until" (role locked_until) is '
            'dropped by the DDL (specs/migrations/reports/0002_drop_lease.sql:1)'
            ) in result.stderr
    # One mistake, one error: the lease form it breaks is not reported again.
    assert result.stderr.count("specs/reports.toml") == 1, result.stderr


def test_role_column_retyped_in_the_ddl_fails_the_check(project: Path) -> None:
    migration = project / "specs" / "migrations" / "mailer" / "0002_attempt_text.sql"
    migration.write_text("ALTER TABLE email_jobs ALTER COLUMN attempt TYPE TEXT;\n")
    result = run(project, "verify")
    assert result.returncode == 1
    assert ('specs/mailer.toml:10: column "email_jobs.attempt" is TEXT '
            '(specs/migrations/mailer/0002_attempt_text.sql:1), but role attempt needs an '
            'integer') in result.stderr


def test_verify_of_named_specs_does_not_call_other_modules_extra(project: Path) -> None:
    result = run(project, "verify", "specs/reports.toml")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("verified 1 module(s)")


def test_usage_errors_exit_2(project: Path) -> None:
    assert run(project, "verify", "no/such/specs").returncode == 2
    assert run(project).returncode == 2
    assert run(project, "frobnicate").returncode == 2


def test_project_settings_errors_name_pyproject_relative_to_the_project(project: Path) -> None:
    (project / "pyproject.toml").write_text('[tool.inboxgen]\nspecs = 3\n', encoding="utf-8")
    (project / "specs" / "sub").mkdir()
    for cwd in (project, project / "specs" / "sub"):
        result = run(cwd, "verify")
        assert result.returncode == 2
        assert str(project) not in result.stderr, result.stderr
    assert run(project, "build").stderr == (
        "inboxgen: pyproject.toml: [tool.inboxgen] specs must be a path string\n")

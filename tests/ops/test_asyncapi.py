"""`inboxgen asyncapi`: the document is valid against the official AsyncAPI 3.0 JSON Schema
(from the npm package @asyncapi/specs, fetched at test time), describes each queue with its
payload schema, and names the server by host and port only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from genutil import REPO, make_project

SECRET = "hunter2-secret"


@pytest.fixture(scope="session")
def asyncapi_schema(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("asyncapi-specs")
    subprocess.run(["npm", "pack", "@asyncapi/specs", "--silent"], cwd=folder, check=True,
                   timeout=180, capture_output=True)
    (tarball,) = folder.glob("*.tgz")
    with tarfile.open(tarball) as tar:
        member = tar.extractfile("package/schemas/3.0.0.json")
        assert member is not None
        schema: dict[str, Any] = json.load(member)
    return schema


def asyncapi(cwd: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    result = subprocess.run([sys.executable, "-m", "inboxgen", "asyncapi", *args], cwd=cwd,
                            capture_output=True, text=True, check=False, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert SECRET not in result.stdout + result.stderr
    doc: dict[str, Any] = json.loads(result.stdout)
    return doc


def test_the_examples_document_is_valid_and_names_no_credential(
        asyncapi_schema: dict[str, Any]) -> None:
    url = f"postgresql://mailer:{SECRET}@db.internal:6432/app"
    doc = asyncapi(REPO, "--database-url", url)
    jsonschema.validate(doc, asyncapi_schema)
    assert doc["servers"]["database"] == {"host": "db.internal:6432", "protocol": "postgresql",
                                          "pathname": "/app"}
    assert "mailer" not in json.dumps(doc["servers"])
    emails = doc["channels"]["mailer"]  # channels are named after the specs
    assert emails["address"] == "email_jobs/{group}" and "group" in emails["parameters"]
    assert "emails.dead" in emails["parameters"]["group"]["description"]
    assert emails["servers"] == [{"$ref": "#/servers/database"}]
    assert "servers" not in doc["channels"]["shop_emails"]  # SQLite: not that server's table
    assert doc["components"]["messages"]["mailer_job"]["contentType"] == \
        "application/octet-stream"
    assert {"enqueue_mailer", "work_mailer"} <= set(doc["operations"])


def test_a_typed_payload_gives_its_schema(tmp_path: Path,
                                          asyncapi_schema: dict[str, Any]) -> None:
    (tmp_path / "emailtypes.py").write_text(
        "import msgspec\n\n\nclass Email(msgspec.Struct):\n    to: str\n    subject: str\n"
        "    retries: int = 0\n")
    make_project(tmp_path, """
        table = "mail"
        dialect = "postgres"

        [columns]
        id = { role = "id", generated = true }
        payload = { role = "payload", type = "emailtypes:Email" }
        """, "CREATE TABLE mail (id BIGSERIAL PRIMARY KEY, payload JSONB NOT NULL);", "mail")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "mailer-service"\n'
                                             'version = "2.1.0"\n[tool.inboxgen]\n'
                                             'specs = "specs"\nout = "generated"\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    build = subprocess.run([sys.executable, "-m", "inboxgen", "build"], cwd=tmp_path,
                           capture_output=True, text=True, check=False, env=env)
    assert build.returncode == 0, build.stderr
    doc = asyncapi(tmp_path, env=env)
    jsonschema.validate(doc, asyncapi_schema)
    assert doc["info"] == {**doc["info"], "title": "mailer-service", "version": "2.1.0"}
    assert "servers" not in doc
    assert doc["components"]["messages"]["mail_job"]["payload"] == {
        "$ref": "#/components/schemas/Email"}
    email = doc["components"]["schemas"]["Email"]
    assert email["required"] == ["to", "subject"]
    assert set(email["properties"]) == {"to", "subject", "retries"}

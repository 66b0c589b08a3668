"""The shop's notes, and the task table, created from the same SQL its inboxgen specs read."""

from pathlib import Path

from django.db import migrations, models

SQL = Path(__file__).resolve().parent.parent / "sql"
FILES = {"postgresql": "postgres.sql", "mysql": "mysql.sql", "sqlite": "sqlite.sql"}


def create_task_table(apps, schema_editor):
    text = (SQL / FILES[schema_editor.connection.vendor]).read_text()
    for statement in text.split(";"):
        if statement.strip():
            schema_editor.execute(statement)


class Migration(migrations.Migration):
    initial = True
    atomic = False  # MySQL/MariaDB commit each DDL statement: no transaction can hold them
    dependencies = []

    operations = [
        migrations.CreateModel(
            name="Note",
            fields=[("id", models.BigAutoField(primary_key=True, serialize=False)),
                    ("text", models.CharField(max_length=100))],
        ),
        migrations.RunPython(create_task_table),
    ]

"""Settings of the task shop. The database comes from the environment: TASKSHOP_ENGINE
(postgresql, mysql or sqlite3), TASKSHOP_NAME and, for a server, TASKSHOP_HOST, TASKSHOP_PORT
and TASKSHOP_USER. TASKSHOP_MODULE replaces the task table's module, TASKSHOP_OPTIONS (JSON)
adds to or replaces the backend's OPTIONS, and TASKSHOP_DEBUG=1 turns DEBUG on (so Django's own
log lines, `django.tasks` among them, reach the console, as in development)."""

import json
import os

ENGINE = os.environ.get("TASKSHOP_ENGINE", "sqlite3")
if ENGINE == "mysql":
    # Django's MySQL backend loads MySQLdb (mysqlclient); PyMySQL stands in for it.
    import pymysql

    pymysql.version_info = (2, 2, 1, "final", 0)
    pymysql.install_as_MySQLdb()

SECRET_KEY = "taskshop-tests-only"
DEBUG = os.environ.get("TASKSHOP_DEBUG") == "1"
USE_TZ = True
INSTALLED_APPS = ["taskshop", "inboxgen.contrib.django"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DATABASES = {"default": {"ENGINE": f"django.db.backends.{ENGINE}",
                         "NAME": os.environ.get("TASKSHOP_NAME", "taskshop.sqlite3")}}
if ENGINE != "sqlite3":
    DATABASES["default"].update(HOST=os.environ["TASKSHOP_HOST"],
                                PORT=os.environ["TASKSHOP_PORT"],
                                USER=os.environ["TASKSHOP_USER"], PASSWORD="")

# The generated module of the task table, one per database kind.
MODULES = {"postgresql": "taskshop.queues.tasks_postgres", "mysql": "taskshop.queues.tasks_mysql",
           "sqlite3": "taskshop.queues.tasks_sqlite"}
TASKS = {
    "default": {
        "BACKEND": "inboxgen.contrib.django.backend.TaskBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"MODULE": os.environ.get("TASKSHOP_MODULE", MODULES[ENGINE]), "WORKERS": 2,
                    **json.loads(os.environ.get("TASKSHOP_OPTIONS", "{}"))},
    },
}

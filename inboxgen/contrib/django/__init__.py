"""Django's task framework (`django.tasks`, Django 6) on an inboxgen queue table.

    TASKS = {"default": {
        "BACKEND": "inboxgen.contrib.django.backend.TaskBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"MODULE": "shop.queues.tasks", "DATABASE": "default", "WORKERS": 4},
    }}

`task.enqueue()` inserts the job through Django's connection, inside the caller's `atomic()`:
the job commits with the request's writes and vanishes with their rollback. Add
"inboxgen.contrib.django" to INSTALLED_APPS for `manage.py inboxgen_serve`, which runs the
workers. Nothing here is imported until Django loads it, so inboxgen works without Django.
"""

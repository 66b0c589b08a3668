from django.db import models


class Note(models.Model):
    """What the shop's requests and tasks write."""

    text = models.CharField(max_length=100)

"""The demo's one model: accounts that an atomic job moves money between."""

from __future__ import annotations

from django.db import models


class Account(models.Model):
    """A named balance, in cents."""

    name = models.CharField(max_length=50, unique=True)
    balance = models.BigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name}: {self.balance}"

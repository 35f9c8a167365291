"""Keys minted for Playground sessions (ordinary org keys, revoked when they expire)."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from accounts.models import ApiKey


class PlaygroundKey(models.Model):
    api_key = models.OneToOneField(ApiKey, on_delete=models.CASCADE, related_name="playground")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"playground key {self.api_key.prefix}… of {self.user}"

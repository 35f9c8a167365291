"""Stored Responses API responses (`store: true`), kept per org for a retention period."""

from __future__ import annotations

from django.db import models

from accounts.models import Organization


class StoredResponse(models.Model):
    """One response as the client saw it, and the conversation a continuation needs.

    `context` is `{"items": [...], "output": [...]}`: the request's input items (the previous
    response's context included, item references resolved) and the output items with their
    reasoning sealed, so `previous_response_id` and `item_reference` rebuild the exact turn.
    Written off the request path by gateway/stored_responses.py; purged by a Celery beat task
    once `expires_at` has passed.
    """

    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="stored_responses")
    response_id = models.CharField(max_length=200)
    model_id = models.CharField(max_length=128)
    response = models.JSONField()
    context = models.JSONField()
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["org", "response_id"], name="stored_response_org_id")
        ]

    def __str__(self) -> str:
        return self.response_id

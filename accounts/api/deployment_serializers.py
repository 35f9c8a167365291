"""Shapes of the operator API's deployments (accounts/api/operator_deployments.py).

Every field `manage.py add_deployment` takes has its name here (`--url` is `base_url`, `--model`
is `models`, `--model-ids` is `model_ids`, `--max-tokens-param` / `--prompt-cache-key` /
`--responses-api` are keys of `options`, `--bedrock-api-key` is `api_key` on a bedrock
deployment, the service-account key file is `service_account_json`). Credentials are
write-only: a response says whether a key is set and shows the hint the admin shows (`…` and its
last 4 characters), never the key.
"""

from __future__ import annotations

import json
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from accounts.api.serializers import StrictInputSerializer
from catalog.deployment_services import Credentials
from catalog.models import Deployment
from catalog.platform_config import KINDS, OPTIONS_HELP
from core.cli import MAX_INT

CREDENTIAL_FIELDS = (
    "api_key",
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
    "service_account_json",
)


class DeploymentSerializer(serializers.Serializer):
    id = serializers.IntegerField(read_only=True)
    name = serializers.CharField(read_only=True)
    kind = serializers.ChoiceField(choices=KINDS, read_only=True)
    base_url = serializers.CharField(
        read_only=True, help_text="Bedrock/Vertex: empty = the region's endpoint."
    )
    region = serializers.CharField(read_only=True)
    project = serializers.CharField(read_only=True)
    models = serializers.SerializerMethodField()
    serves_all_models = serializers.BooleanField(read_only=True)
    model_ids = serializers.DictField(
        child=serializers.CharField(),
        read_only=True,
        help_text="Catalog model id → the id the provider knows it by, over the defaults.",
    )
    options = serializers.DictField(
        child=serializers.JSONField(), read_only=True, help_text=OPTIONS_HELP
    )
    weight = serializers.IntegerField(read_only=True)
    max_concurrency = serializers.IntegerField(read_only=True)
    fair_share = serializers.FloatField(read_only=True)
    enabled = serializers.BooleanField(read_only=True)
    api_key_set = serializers.SerializerMethodField()
    api_key_hint = serializers.CharField(
        read_only=True, help_text="`…` and the key's last 4 characters (empty: no key)."
    )
    credentials_hint = serializers.CharField(
        source="secrets_hint",
        read_only=True,
        help_text="The platform credentials named, not shown (AWS key …ABCD; service account).",
    )
    created_at = serializers.DateTimeField(read_only=True)
    updated_at = serializers.DateTimeField(read_only=True)

    @extend_schema_field(
        serializers.ListField(
            child=serializers.CharField(),
            help_text="Catalog model ids it serves; empty = every catalog Claude model.",
        )
    )
    def get_models(self, deployment: Deployment) -> list[str]:
        return sorted(link.model_id for link in deployment.models.all())

    @extend_schema_field(serializers.BooleanField())
    def get_api_key_set(self, deployment: Deployment) -> bool:
        return bool(deployment.api_key_encrypted)


def _text(**kwargs: Any) -> serializers.CharField:
    return serializers.CharField(required=False, allow_blank=True, **kwargs)


def _secret(help_text: str, **kwargs: Any) -> serializers.CharField:
    return serializers.CharField(
        write_only=True, required=False, max_length=8192, help_text=help_text, **kwargs
    )


def _count(help_text: str) -> serializers.IntegerField:
    return serializers.IntegerField(
        min_value=1, max_value=MAX_INT, required=False, help_text=help_text
    )


class DeploymentWriteSerializer(StrictInputSerializer):
    """What a POST (everything but `name` optional) or a PATCH (every field optional) takes."""

    name = serializers.CharField(max_length=100)
    kind = serializers.ChoiceField(
        choices=KINDS, required=False, help_text="Default (on create): anthropic."
    )
    base_url = _text(
        max_length=500,
        help_text="anthropic: the base URL; openai: the SDK's base_url (ends in /v1); "
        "azure-openai: the resource endpoint; bedrock/vertex: optional.",
    )
    region = _text(max_length=64, help_text="bedrock/vertex.")
    project = _text(max_length=64, help_text="vertex: the Google Cloud project.")
    api_key = _secret(
        "Write-only. anthropic: the x-api-key; openai: the Bearer key (optional); azure-openai: "
        "the api-key; bedrock: a Bedrock API key."
    )
    aws_access_key_id = _secret("Write-only. bedrock.")
    aws_secret_access_key = _secret("Write-only. bedrock.")
    aws_session_token = _secret("Write-only. bedrock (optional).")
    service_account_json = serializers.JSONField(
        write_only=True,
        required=False,
        help_text="Write-only. vertex: the service-account key file (its JSON object or text).",
    )
    models = serializers.ListField(
        child=serializers.CharField(max_length=128),
        required=False,
        max_length=1000,
        help_text="Catalog model ids; required for the openai kinds; empty = every catalog "
        "Claude model.",
    )
    model_ids = serializers.DictField(
        child=serializers.CharField(max_length=2048),
        required=False,
        help_text="Catalog model id → the provider's id for it (default: the id after its /).",
    )
    # Values as sent (strings, or true/false for responses_api): platform_config checks them
    # by type, so "true" is not taken for true.
    options = serializers.DictField(
        child=serializers.JSONField(), required=False, help_text=OPTIONS_HELP
    )
    weight = _count("Share of the traffic among a model's deployments (default 1).")
    max_concurrency = _count("Requests in flight at once (default 100).")
    fair_share = serializers.FloatField(
        min_value=0.01,
        max_value=1.0,
        required=False,
        help_text="The most of max_concurrency one org may hold while another is active "
        "there (default 0.5; 1 = no share rule).",
    )
    enabled = serializers.BooleanField(required=False)

    def validate_service_account_json(self, value: Any) -> str:
        if isinstance(value, dict):
            return json.dumps(value)
        if isinstance(value, str):
            return value
        raise serializers.ValidationError("must be the key file's JSON object (or its text)")


class DeploymentUpdateSerializer(DeploymentWriteSerializer):
    """A PATCH: absent fields keep their value. Credentials are replaced as a set: sending any
    of them replaces all of them (send every one the deployment needs); `api_key: null` leaves
    it without one (an openai deployment in front of a keyless server)."""

    name = serializers.CharField(max_length=100, required=False)
    api_key = _secret(
        "Write-only. Replaces the deployment's credentials; null = none.", allow_null=True
    )


def credentials_from(data: dict[str, Any]) -> Credentials | None:
    """The credentials a request gives, or None when it gives none (the stored ones stay)."""
    if not any(name in data for name in CREDENTIAL_FIELDS):
        return None
    return Credentials(**{name: data.get(name) or "" for name in CREDENTIAL_FIELDS})

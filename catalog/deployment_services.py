"""Writes to provider deployments: the one place their input is checked and saved.

`manage.py add_deployment` / `set_deployment`, the operator API (`/api/v1/operator/deployments`,
accounts/api/operator_deployments.py) and the tests all come through here, so a deployment is
refused the same way whichever door it came by. The per-kind rules are catalog/platform_config.py's,
the URL rules catalog/deployment_urls.py's; this module adds what needs the database (the models
it serves are in the catalog, its name is free) and names every refusal's field in one vocabulary
(`DeploymentInputError.field`: the operator API's field names; the command maps them to flags).

Credentials are write-only everywhere: they are sealed on the row (catalog/crypto.py), and the
audit lines written here say whether they were set or kept, never what they are. Every save moves
CatalogVersion (catalog/signals.py), so routing follows within EZAT_CATALOG_POLL_INTERVAL seconds
without a restart, exactly as an admin edit does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from catalog import platform_config
from catalog.deployment_urls import validate_base_url
from catalog.models import Deployment, DeploymentModel, Model
from core.audit import audit

# PlatformConfigError's field → the field here (the rest are the same, `options.X` → options).
_CONFIG_FIELDS = {
    "url": "base_url",
    "bedrock_api_key": "api_key",
    "service_account_file": "service_account_json",
}
# What Deployment.full_clean may refuse, in the same vocabulary.
_MODEL_FIELDS = ("name", "kind", "base_url", "weight", "max_concurrency", "fair_share")
_SEALED = ["api_key_encrypted", "api_key_hint", "secrets_encrypted", "secrets_hint"]


class DeploymentInputError(ValueError):
    """A deployment cannot be saved as given; `field` names what to fix (`models`, `base_url`,
    `api_key`, `options`, …), `message` says why. Nothing was written."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Credentials:
    """New credentials for a deployment. Which apply depends on its kind: `api_key` is the
    Anthropic x-api-key, the OpenAI-compatible Bearer key, the Azure api-key or a Bedrock API
    key; the AWS keys are Bedrock's, the service-account key file (its JSON text) Vertex's."""

    api_key: str = ""
    aws_access_key_id: str = ""
    aws_secret_access_key: str = ""
    aws_session_token: str = ""
    service_account_json: str = ""

    def given(self) -> bool:
        return any(vars(self).values())


@dataclass(frozen=True)
class DeploymentInput:
    """Everything a deployment is made of. `None` means "keep what is saved" (on a new one: the
    model's default); `credentials=None` keeps the stored ones when the kind stays the same."""

    name: str
    kind: str = Deployment.Kind.ANTHROPIC
    base_url: str = ""
    region: str = ""
    project: str = ""
    credentials: Credentials | None = None
    models: Sequence[str] = ()  # catalog model ids; empty = every catalog (Claude) model
    model_ids: dict[str, str] | None = None  # catalog id → the platform's id for it
    options: dict[str, str | bool] | None = None
    weight: int | None = None
    max_concurrency: int | None = None
    fair_share: float | None = None
    enabled: bool | None = None


def current_input(deployment: Deployment) -> DeploymentInput:
    """What a saved deployment is, as input (credentials kept): the base a PATCH changes."""
    models = () if deployment.serves_all_models else _served_models(deployment)
    return DeploymentInput(
        name=deployment.name,
        kind=deployment.kind,
        base_url=deployment.base_url,
        region=deployment.region,
        project=deployment.project,
        models=models,
        model_ids=dict(deployment.model_ids or {}),
        options=dict(deployment.options or {}),
    )


def _served_models(deployment: Deployment) -> tuple[str, ...]:
    return tuple(deployment.models.order_by("model_id").values_list("model_id", flat=True))


def _unknown_models(ids: Sequence[str]) -> list[str]:
    known = set(Model.objects.filter(id__in=list(ids)).values_list("id", flat=True))
    return sorted(set(ids) - known)


def _checked_config(
    spec: DeploymentInput, *, keeps_credentials: bool
) -> platform_config.PlatformConfig:
    """The platform configuration, normalised, or DeploymentInputError naming the field."""
    credentials = spec.credentials or Credentials()
    try:
        config = platform_config.check(
            platform_config.PlatformConfig(
                kind=spec.kind,
                base_url=spec.base_url,
                region=spec.region,
                project=spec.project,
                api_key=credentials.api_key.strip(),
                aws_access_key_id=credentials.aws_access_key_id,
                aws_secret_access_key=credentials.aws_secret_access_key,
                aws_session_token=credentials.aws_session_token,
                service_account_json=credentials.service_account_json,
                model_ids=spec.model_ids if spec.model_ids is not None else {},
                options=spec.options if spec.options is not None else {},
            ),
            existing_secrets=keeps_credentials,
        )
    except platform_config.PlatformConfigError as exc:
        field = exc.field.split(".", 1)[0]
        message = exc.message if field == exc.field else f"{exc.field}: {exc.message}"
        raise DeploymentInputError(_CONFIG_FIELDS.get(field, field), message) from None
    try:
        config.base_url = validate_base_url(config.base_url, spec.kind)
    except ValidationError as exc:
        raise DeploymentInputError("base_url", " ".join(exc.messages)) from None
    return config


def _check_models(spec: DeploymentInput, config: platform_config.PlatformConfig) -> None:
    models = list(spec.models)
    if len(set(models)) != len(models):
        raise DeploymentInputError("models", "lists a model more than once")
    unknown = _unknown_models(models)
    if unknown:
        raise DeploymentInputError("models", f"unknown model id(s): {', '.join(unknown)}")
    if spec.kind in platform_config.OPENAI_KINDS and not models:
        # A Chat Completions server serves the models it was started with, not the catalog.
        raise DeploymentInputError(
            "models", f"a {spec.kind} deployment must list the models it serves"
        )
    unknown = _unknown_models(list(config.model_ids))
    if unknown:
        raise DeploymentInputError("model_ids", f"unknown model id(s): {', '.join(unknown)}")


@transaction.atomic
def save_deployment(
    spec: DeploymentInput, *, deployment: Deployment | None = None
) -> tuple[Deployment, list[str]]:
    """Create (`deployment=None`) or replace a deployment with `spec`; (the row, the names of
    the fields that changed). Checked whole first: DeploymentInputError names the field and
    nothing is written. Credentials are replaced when given, on a new deployment or a change of
    kind (then with none if none are given), else kept."""
    created = deployment is None
    clash = Deployment.objects.filter(name=spec.name)
    if not created:
        clash = clash.exclude(pk=deployment.pk)
    if clash.exists():
        raise DeploymentInputError("name", f"a deployment named {spec.name!r} already exists")
    if deployment is None:
        deployment = Deployment(name=spec.name)
    keeps = not created and deployment.kind == spec.kind and spec.credentials is None
    config = _checked_config(spec, keeps_credentials=keeps)
    _check_models(spec, config)
    before = _snapshot(deployment) if not created else {}
    deployment.name = spec.name
    deployment.kind = spec.kind
    deployment.base_url, deployment.region, deployment.project = (
        config.base_url,
        config.region,
        config.project,
    )
    credentials_changed = not keeps
    if credentials_changed:
        if config.api_key:
            deployment.set_api_key(config.api_key)
        else:
            deployment.api_key_encrypted = deployment.api_key_hint = ""
        deployment.set_secrets(config.secrets())
    if spec.model_ids is not None:
        deployment.model_ids = config.model_ids
    if spec.options is not None:
        deployment.options = config.options
    deployment.serves_all_models = not spec.models
    for name in ("weight", "max_concurrency", "fair_share", "enabled"):
        value = getattr(spec, name)
        if value is not None:
            setattr(deployment, name, value)
    _full_clean(deployment)
    try:
        with transaction.atomic():
            deployment.save()
    except IntegrityError:  # a concurrent create took the name between the check and now
        raise DeploymentInputError(
            "name", f"a deployment named {spec.name!r} already exists"
        ) from None
    deployment.models.exclude(model_id__in=list(spec.models)).delete()
    for model_id in spec.models:
        DeploymentModel.objects.get_or_create(deployment=deployment, model_id=model_id)
    after = _snapshot(deployment)
    changed = sorted(k for k in after if before.get(k) != after[k])
    if credentials_changed and spec.credentials is not None:
        changed = sorted({*changed, "credentials"})
    audit_saved(
        deployment, created=created, changed=changed, credentials_changed=credentials_changed
    )
    return deployment, changed


def _full_clean(deployment: Deployment) -> None:
    try:
        deployment.full_clean(exclude=_SEALED, validate_unique=False)
    except ValidationError as exc:
        field, messages = next(iter(exc.message_dict.items()))
        name = field if field in _MODEL_FIELDS else "non_field_errors"
        raise DeploymentInputError(name, " ".join(messages)) from None


def _snapshot(deployment: Deployment) -> dict[str, Any]:
    """What the audit compares: every field but the sealed ones (their hints stand for them)."""
    return {
        "name": deployment.name,
        "kind": deployment.kind,
        "base_url": deployment.base_url,
        "region": deployment.region,
        "project": deployment.project,
        "models": _served_models(deployment) if deployment.pk else (),
        "serves_all_models": deployment.serves_all_models,
        "model_ids": dict(deployment.model_ids or {}),
        "options": dict(deployment.options or {}),
        "weight": deployment.weight,
        "max_concurrency": deployment.max_concurrency,
        "fair_share": deployment.fair_share,
        "enabled": deployment.enabled,
        "credentials": (deployment.api_key_hint, deployment.secrets_hint),
    }


def audit_saved(
    deployment: Deployment, *, created: bool, changed: list[str], credentials_changed: bool
) -> None:
    """The audit line of a saved deployment (here, and the admin's form, which saves itself)."""
    # Names of fields and whether a key is set: never a credential, nor its hint.
    audit(
        "deployment.create" if created else "deployment.update",
        deployment=deployment.name,
        deployment_id=deployment.pk,
        kind=deployment.kind,
        changed=changed,
        credentials="replaced" if credentials_changed else "kept",
        api_key_set=bool(deployment.api_key_encrypted),
    )


def upsert(spec: DeploymentInput) -> tuple[Deployment, bool]:
    """Create the deployment named `spec.name`, or replace the saved one (add_deployment)."""
    existing = Deployment.objects.filter(name=spec.name).first()
    deployment, _ = save_deployment(spec, deployment=existing)
    return deployment, existing is None


def create_deployment(spec: DeploymentInput) -> Deployment:
    """A new deployment; an existing name is a DeploymentInputError on `name`."""
    return save_deployment(spec, deployment=None)[0]


def update_deployment(deployment: Deployment, **changes: Any) -> tuple[Deployment, list[str]]:
    """Change some of a deployment's fields (DeploymentInput's names): the others keep their
    saved values, and its credentials are kept unless `credentials` is given."""
    unknown = sorted(set(changes) - {f.name for f in fields(DeploymentInput)})
    if unknown:
        raise DeploymentInputError(unknown[0], "unknown field")
    spec = DeploymentInput(**{**vars(current_input(deployment)), **changes})
    return save_deployment(spec, deployment=deployment)


def set_deployment_enabled(deployment: Deployment, *, enabled: bool) -> bool:
    """Turn a deployment on or off; whether that changed anything."""
    if deployment.enabled == enabled:
        return False
    deployment.enabled = enabled
    # save() on the row, not queryset.update(): the post_save signal bumps CatalogVersion.
    deployment.save(update_fields=["enabled", "updated_at"])
    audit(
        "deployment.enable" if enabled else "deployment.disable",
        deployment=deployment.name,
        deployment_id=deployment.pk,
    )
    return True


@transaction.atomic
def delete_deployment(deployment: Deployment) -> None:
    """Remove a deployment and the models it lists. Usage records keep its name (a string)."""
    name, pk = deployment.name, deployment.pk
    deployment.delete()  # post_delete bumps CatalogVersion (catalog/signals.py)
    audit("deployment.delete", deployment=name, deployment_id=pk)

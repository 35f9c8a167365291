"""Operator console for the catalog: models (aliases, prices) and provider deployments.

Every save here moves `CatalogVersion` (catalog/signals.py), which the gateway processes poll:
an edit reaches new requests within EZAT_CATALOG_POLL_INTERVAL seconds. Usage records keep the
prices they were billed at, so a price change never rewrites history.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import quote
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from catalog.deployment_services import audit_saved, delete_deployment, set_deployment_enabled
from catalog.deployment_urls import validate_base_url
from catalog.models import (
    Deployment,
    DeploymentModel,
    Model,
    ModelAlias,
    PriceTier,
    PriceVersion,
    SuggestedChain,
)
from catalog.platform_config import OPENAI_KINDS, OPTIONS_HELP, PlatformConfig, PlatformConfigError
from catalog.platform_config import check as check_platform
from catalog.pricing import TierError, check_tier_bounds
from catalog.selectors import current_tiers, tier_figures
from catalog.services import describe_tiers
from core.money_fields import AmountField


class ModelAliasInline(admin.TabularInline):
    model = ModelAlias
    extra = 1


def _tiers_text(version: PriceVersion) -> str:
    """A version's tiers on one line, prices as plain decimals (the one money formatter)."""
    return describe_tiers([tier_figures(t) for t in version.tiers.all()]) or "(no tiers)"


class PriceHistoryInline(admin.TabularInline):
    """Every price version of the model, newest first: read-only history."""

    model = PriceVersion
    extra = 0
    can_delete = False
    show_change_link = True
    fields = ("effective_from", "prices", "source")
    readonly_fields = ("effective_from", "prices", "source")
    ordering = ("-effective_from", "-id")
    verbose_name_plural = "Price history (USD per million tokens; newest first)"

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[PriceVersion]:
        return super().get_queryset(request).prefetch_related("tiers")

    @admin.display(description="Prices")
    def prices(self, obj: PriceVersion) -> str:
        return _tiers_text(obj)


@admin.register(Model)
class CatalogModelAdmin(admin.ModelAdmin):
    list_display = (
        "id",
        "name",
        "enabled",
        "current_prices",
        "max_output_tokens",
        "context_window",
        "aliases_list",
        "checked_on",
    )
    list_filter = ("enabled",)
    search_fields = ("id", "name", "aliases__alias")
    inlines = (ModelAliasInline, PriceHistoryInline)
    readonly_fields = ("created_at", "updated_at", "current_prices", "new_prices_link")
    fieldsets = (
        (None, {"fields": ("id", "name", "enabled", "sort_order")}),
        (
            "Prices (USD per million tokens)",
            {
                "description": (
                    "Prices are versioned: a change is a new price version, effective from the "
                    "moment it is saved, and reaches new requests within seconds (the gateway's "
                    "catalog snapshot reloads). Requests admitted before keep the version they "
                    "were admitted with, and every usage record names its version. "
                    "The history is listed below."
                ),
                "fields": ("current_prices", "new_prices_link"),
            },
        ),
        (
            "Capabilities and limits",
            {
                "fields": (
                    "max_output_tokens",
                    "context_window",
                    "sampling",
                    "prompt_caching",
                    "vision",
                    "pdf",
                    "tools",
                    "structured_outputs",
                    "thinking",
                    "thinking_can_be_disabled",
                    "forced_tool_choice",
                    "reasoning_efforts",
                    "default_effort",
                )
            },
        ),
        (
            "Media (worst case per image and PDF page, for admission holds)",
            {"fields": ("image_max_tokens", "pdf_page_max_tokens", "pdf_max_pages")},
        ),
        ("Source of the figures", {"fields": ("source_url", "checked_on")}),
        ("History", {"fields": ("created_at", "updated_at")}),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Model]:
        return super().get_queryset(request).prefetch_related("aliases")

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "source_url":
            kwargs["assume_scheme"] = "https"  # explicit, as Django 6 will default to it
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> tuple:
        # The id is what usage records and deployments refer to: fixed once created.
        return (*self.readonly_fields, "id") if obj is not None else self.readonly_fields

    @admin.display(description="Aliases")
    def aliases_list(self, obj: Model) -> str:
        return ", ".join(a.alias for a in obj.aliases.all())

    @admin.display(description="Prices in force")
    def current_prices(self, obj: Model) -> str:
        if obj.pk is None:
            return "—"
        tiers = current_tiers(obj)
        return (
            describe_tiers(tiers) if tiers else "none: the model is not served until it has prices"
        )

    @admin.display(description="Change prices")
    def new_prices_link(self, obj: Model) -> str:
        if obj.pk is None:
            return "Save the model first, then add its prices."
        url = reverse("admin:catalog_priceversion_add") + f"?model={quote(obj.pk)}"
        return format_html('<a href="{}">Add a new price version</a>', url)


class PriceTierFormSet(forms.BaseInlineFormSet):
    """The tiers of one version must cover every prompt size once (the file's rule too)."""

    def clean(self) -> None:
        super().clean()
        bounds = [
            form.cleaned_data.get("up_to_prompt_tokens")
            for form in self.forms
            if form.cleaned_data and not form.cleaned_data.get("DELETE")
        ]
        bounds.sort(key=lambda bound: (bound is None, bound or 0))
        try:
            check_tier_bounds(bounds)
        except TierError as exc:
            raise forms.ValidationError(str(exc)) from None


class PriceTierInline(admin.TabularInline):
    model = PriceTier
    formset = PriceTierFormSet
    # Prices are typed by people: plain digits only, bounds worded without exponents.
    formfield_overrides = {models.DecimalField: {"form_class": AmountField}}
    extra = 2
    min_num = 1
    fields = (
        "up_to_prompt_tokens",
        "price_input",
        "price_output",
        "price_cache_read",
        "price_cache_write_5m",
        "price_cache_write_1h",
    )
    verbose_name_plural = (
        "Tiers by prompt size (input + cache read + cache write tokens); leave the bound of "
        "the last tier empty"
    )

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None  # a saved version is history: never edited

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None


class PriceVersionForm(forms.ModelForm):
    class Meta:
        model = PriceVersion
        fields = ("model",)


@admin.register(PriceVersion)
class PriceVersionAdmin(admin.ModelAdmin):
    """New prices for a model. Saved versions are read-only: a correction is a new version."""

    form = PriceVersionForm
    inlines = (PriceTierInline,)
    list_display = ("model", "effective_from", "prices", "source")
    list_filter = ("model",)
    list_select_related = ("model",)
    date_hierarchy = "effective_from"

    def get_queryset(self, request: HttpRequest) -> QuerySet[PriceVersion]:
        return super().get_queryset(request).prefetch_related("tiers")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple:
        return ("model", "effective_from", "source", "created_at") if obj is not None else ()

    def get_fields(self, request: HttpRequest, obj: Any = None) -> tuple:
        return (
            ("model", "effective_from", "source", "created_at") if obj is not None else ("model",)
        )

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="Prices (USD per million tokens)")
    def prices(self, obj: PriceVersion) -> str:
        return _tiers_text(obj)

    def save_model(self, request: HttpRequest, obj: PriceVersion, form: Any, change: bool) -> None:
        obj.effective_from = timezone.now()
        obj.source = f"admin: {request.user.get_username()}"[:200]
        super().save_model(request, obj, form, change)


class DeploymentModelInline(admin.TabularInline):
    model = DeploymentModel
    extra = 0
    fields = ("model", "upstream_model_id")
    verbose_name_plural = "Models served (only used when 'serves all models' is off)"


def _secret_field(label: str, help_text: str = "") -> forms.CharField:
    # Write-only: a stored secret is never put back into the page, not even masked.
    return forms.CharField(
        label=label,
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text=help_text or "Leave empty to keep the current one. Stored encrypted.",
    )


class DeploymentAdminForm(forms.ModelForm):
    new_api_key = _secret_field(
        "New API key (Anthropic x-api-key, a Bedrock API key, an OpenAI-compatible Bearer key "
        "or an Azure OpenAI api-key)",
        "Leave empty to keep the current key. Stored encrypted; only its hint is shown.",
    )
    new_aws_access_key_id = _secret_field("New AWS access key id (Bedrock)")
    new_aws_secret_access_key = _secret_field("New AWS secret access key (Bedrock)")
    new_aws_session_token = _secret_field("New AWS session token (Bedrock, optional)")
    service_account_file = forms.FileField(
        label="New service-account key file (Vertex)",
        required=False,
        help_text="JSON key file; leave empty to keep the current one (or to use ADC).",
    )

    # Declared so Django 6's https default is explicit (and the deprecation warning silent).
    base_url = forms.URLField(max_length=500, assume_scheme="https", required=False)

    class Meta:
        model = Deployment
        fields = (
            "name",
            "kind",
            "base_url",
            "region",
            "project",
            "model_ids",
            "options",
            "weight",
            "enabled",
            "max_concurrency",
            "fair_share",
            "serves_all_models",
        )
        help_texts = {"options": OPTIONS_HELP}

    def clean_base_url(self) -> str:
        # The same checks as the CLI's (catalog/deployment_urls.py): a scheme or host the
        # gateway cannot call is refused here, not found out by the customers' requests.
        return validate_base_url(self.cleaned_data["base_url"], self.cleaned_data.get("kind"))

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        upload = data.get("service_account_file")
        account = ""
        if upload:
            try:
                account = upload.read().decode()
            except UnicodeDecodeError:
                self.add_error("service_account_file", "is not a JSON text file")
                return data
        kind = data.get("kind") or Deployment.Kind.ANTHROPIC
        keeps = bool(self.instance.pk) and self.instance.kind == kind
        config = PlatformConfig(
            kind=kind,
            base_url=data.get("base_url") or "",
            region=data.get("region") or "",
            project=data.get("project") or "",
            api_key=data.get("new_api_key") or "",
            aws_access_key_id=data.get("new_aws_access_key_id") or "",
            aws_secret_access_key=data.get("new_aws_secret_access_key") or "",
            aws_session_token=data.get("new_aws_session_token") or "",
            service_account_json=account,
            model_ids=data.get("model_ids") or {},
            options=data.get("options") or {},
        )
        if kind in OPENAI_KINDS and data.get("serves_all_models"):
            # A Chat Completions server serves what it was started with, not the catalog.
            self.add_error("serves_all_models", f"a {kind} deployment lists its models below")
            return data
        try:
            check_platform(config, existing_secrets=keeps)
        except PlatformConfigError as exc:
            self.add_error(_FORM_FIELDS.get(exc.field), exc.message)
            return data
        data["base_url"], data["region"], data["project"] = (
            config.base_url,
            config.region,
            config.project,
        )
        data["options"] = config.options
        self.platform_config = config
        self.replaces_credentials = not keeps or bool(config.api_key or config.secrets())
        return data


# A PlatformConfigError's field → the form field that shows it (None: the form's top).
_FORM_FIELDS: dict[str, str | None] = {
    "url": "base_url",
    "region": "region",
    "project": "project",
    "model_ids": "model_ids",
    "options": "options",
    "api_key": "new_api_key",
    "bedrock_api_key": "new_api_key",
    "aws_access_key_id": "new_aws_access_key_id",
    "aws_secret_access_key": "new_aws_secret_access_key",
    "aws_session_token": "new_aws_session_token",
    "service_account_file": "service_account_file",
    "service_account_json": "service_account_file",
}


# The form's write-only fields: never named in an audit line one by one ("credentials" is).
_CREDENTIAL_FORM_FIELDS = (
    "new_api_key",
    "new_aws_access_key_id",
    "new_aws_secret_access_key",
    "new_aws_session_token",
    "service_account_file",
)


@admin.register(Deployment)
class DeploymentAdmin(admin.ModelAdmin):
    form = DeploymentAdminForm
    list_display = (
        "name",
        "kind",
        "base_url",
        "enabled",
        "weight",
        "max_concurrency",
        "fair_share",
        "api_key_hint",
    )
    list_filter = ("enabled", "kind")
    search_fields = ("name", "base_url")
    inlines = (DeploymentModelInline,)
    # `api_key_encrypted` is deliberately absent everywhere; `api_key_hint` is safe to show.
    fields = (
        "name",
        "kind",
        "base_url",
        "region",
        "project",
        "new_api_key",
        "api_key_hint",
        "new_aws_access_key_id",
        "new_aws_secret_access_key",
        "new_aws_session_token",
        "service_account_file",
        "secrets_hint",
        "model_ids",
        "options",
        "weight",
        "enabled",
        "max_concurrency",
        "fair_share",
        "serves_all_models",
        "created_at",
        "updated_at",
    )
    readonly_fields = ("api_key_hint", "secrets_hint", "created_at", "updated_at")
    actions = ("enable_deployments", "disable_deployments")

    def save_model(self, request: HttpRequest, obj: Deployment, form: Any, change: bool) -> None:
        config = getattr(form, "platform_config", None)
        if config is not None and form.replaces_credentials:
            if config.api_key:
                obj.set_api_key(config.api_key)
            else:
                obj.api_key_encrypted = obj.api_key_hint = ""
            obj.set_secrets(config.secrets())
        super().save_model(request, obj, form, change)
        replaced = config is not None and form.replaces_credentials
        changed = [n for n in form.changed_data if n not in _CREDENTIAL_FORM_FIELDS]
        audit_saved(
            obj,
            created=not change,
            changed=sorted({*changed, *(["credentials"] if replaced and change else [])}),
            credentials_changed=replaced,
        )

    def delete_model(self, request: HttpRequest, obj: Deployment) -> None:
        delete_deployment(obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Deployment]) -> None:
        for deployment in queryset:  # one by one: each delete audited and signalled
            delete_deployment(deployment)

    def _set_enabled(self, request: HttpRequest, queryset: QuerySet[Deployment], on: bool) -> None:
        # Row by row through the service (not queryset.update()): the post_save signal bumps
        # CatalogVersion, and each change is audited.
        changed = sum(
            set_deployment_enabled(deployment, enabled=on)
            for deployment in queryset.exclude(enabled=on)
        )
        verb = "enabled" if on else "disabled"
        self.message_user(
            request,
            f"{changed} deployment(s) {verb}; routing follows within seconds.",
            messages.SUCCESS,
        )

    @admin.action(description="Enable the selected deployments")
    def enable_deployments(self, request: HttpRequest, queryset: QuerySet[Deployment]) -> None:
        self._set_enabled(request, queryset, True)

    @admin.action(description="Disable the selected deployments")
    def disable_deployments(self, request: HttpRequest, queryset: QuerySet[Deployment]) -> None:
        self._set_enabled(request, queryset, False)


@admin.register(SuggestedChain)
class SuggestedChainAdmin(admin.ModelAdmin):
    """Suggested model chains, as loaded from the catalog file (`suggestedChains`): read-only
    here, like the figures they rest on; change them in the file and run load_catalog."""

    list_display = ("model", "chain", "checked_on")
    readonly_fields = ("model", "chain", "why", "source_url", "checked_on", "sort_order")
    fields = readonly_fields

    @admin.display(description="Models, in order")
    def chain(self, obj: SuggestedChain) -> str:
        return " → ".join(obj.model_ids)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

"""Models, their aliases, capabilities and prices; provider deployments that serve them."""

from __future__ import annotations

import json
from decimal import Decimal

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from catalog import crypto

PRICE_FIELD = {"max_digits": 14, "decimal_places": 6, "validators": [MinValueValidator(Decimal(0))]}


class Model(models.Model):
    """A model in the catalog: limits and capabilities. Its prices are `PriceVersion`s."""

    class Thinking(models.TextChoices):
        ADAPTIVE = "adaptive", "Adaptive (effort)"
        EXTENDED = "extended", "Extended (budget_tokens)"
        EFFORT = "effort", "Reasoning effort (the provider's own)"
        NONE = "none", "None / not stated"

    id = models.CharField(primary_key=True, max_length=128, help_text="anthropic/claude-sonnet-5-5")
    name = models.CharField(max_length=200)
    enabled = models.BooleanField(default=True)
    sampling = models.BooleanField(default=False)
    prompt_caching = models.BooleanField(default=True)
    vision = models.BooleanField(default=True)
    pdf = models.BooleanField(default=True)
    tools = models.BooleanField(default=True)
    structured_outputs = models.BooleanField(default=True)
    reasoning_efforts = models.JSONField(default=list, blank=True, help_text='e.g. ["low", "high"]')
    default_effort = models.CharField(max_length=16, blank=True)
    thinking = models.CharField(max_length=16, choices=Thinking.choices, default=Thinking.NONE)
    thinking_can_be_disabled = models.BooleanField(
        default=True, help_text='Off where the provider refuses thinking {"type": "disabled"}.'
    )
    forced_tool_choice = models.BooleanField(
        default=True, help_text="Off where the provider refuses a forced tool_choice (any/tool)."
    )
    max_output_tokens = models.PositiveIntegerField()
    context_window = models.PositiveIntegerField()
    # Worst-case media costs (catalog/media.py cites the documentation). Defaults: the largest
    # documented figures, so a model added by hand is never held too low.
    image_max_tokens = models.PositiveIntegerField(
        default=4784, help_text="Tokens of one image at the model's maximal native resolution."
    )
    pdf_page_max_tokens = models.PositiveIntegerField(
        default=7784, help_text="Tokens of one PDF page at most: its image plus its text."
    )
    pdf_max_pages = models.PositiveIntegerField(
        default=600, help_text="PDF pages one request may carry (the provider refuses more)."
    )
    source_url = models.URLField(
        max_length=500, blank=True, help_text="Where the figures come from."
    )
    checked_on = models.DateField(null=True, blank=True, help_text="When they were last checked.")
    sort_order = models.IntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["sort_order", "id"]

    def __str__(self) -> str:
        return self.id

    @property
    def default_upstream_id(self) -> str:
        return self.id.split("/", 1)[-1]


class PriceVersion(models.Model):
    """A model's prices from `effective_from` on. Never edited: a change is a new version.

    A request is billed at the version that was current when it was admitted (the gateway's
    catalog snapshot), and its usage record names the version, so history is never rewritten.
    """

    model = models.ForeignKey(Model, on_delete=models.CASCADE, related_name="price_versions")
    effective_from = models.DateTimeField(db_index=True)
    source = models.CharField(max_length=200, blank=True, help_text="Who or what set it.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["model_id", "-effective_from", "-id"]

    def __str__(self) -> str:
        return f"{self.model_id} prices v{self.pk} from {self.effective_from:%Y-%m-%d %H:%M:%S}"


class PriceTier(models.Model):
    """Prices of one version for prompts up to `up_to_prompt_tokens` (empty: no bound).

    USD per million tokens, exact decimals. The prompt counts input, cache-read and
    cache-write tokens.
    """

    version = models.ForeignKey(PriceVersion, on_delete=models.CASCADE, related_name="tiers")
    up_to_prompt_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    price_input = models.DecimalField(**PRICE_FIELD)
    price_output = models.DecimalField(**PRICE_FIELD)
    price_cache_read = models.DecimalField(**PRICE_FIELD)
    price_cache_write_5m = models.DecimalField(**PRICE_FIELD)
    price_cache_write_1h = models.DecimalField(**PRICE_FIELD)

    class Meta:
        ordering = ["version_id", models.F("up_to_prompt_tokens").asc(nulls_last=True)]

    def __str__(self) -> str:
        bound = self.up_to_prompt_tokens
        return f"up to {bound:,} prompt tokens" if bound is not None else "any prompt size"


class ModelAlias(models.Model):
    """Another name for a model. Stored normalised (trimmed, lower case) so lookup is exact."""

    alias = models.CharField(max_length=128, unique=True)
    model = models.ForeignKey(Model, on_delete=models.CASCADE, related_name="aliases")

    class Meta:
        ordering = ["alias"]
        verbose_name_plural = "model aliases"

    def __str__(self) -> str:
        return self.alias

    def save(self, *args: object, **kwargs: object) -> None:
        self.alias = self.alias.strip().lower()
        super().save(*args, **kwargs)


class Deployment(models.Model):
    """A provider endpoint. Its API key is encrypted at rest and never displayed in full."""

    class Kind(models.TextChoices):
        ANTHROPIC = "anthropic", "Anthropic Messages API"
        BEDROCK = "bedrock", "Claude on Amazon Bedrock"
        VERTEX = "vertex", "Claude on Google Vertex AI"
        OPENAI = "openai", "OpenAI-compatible Chat Completions (OpenAI, vLLM, Ollama, Groq, …)"
        AZURE_OPENAI = "azure-openai", "Azure OpenAI (v1 API)"

    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.ANTHROPIC)
    base_url = models.URLField(
        max_length=500, blank=True, help_text="Bedrock/Vertex: empty = the region's endpoint."
    )
    # Anthropic: the x-api-key; Bedrock: a Bedrock API key (Bearer), if it uses one.
    api_key_encrypted = models.TextField(blank=True, editable=False)
    api_key_hint = models.CharField(max_length=16, blank=True, editable=False)
    region = models.CharField(max_length=64, blank=True, help_text="Bedrock/Vertex region.")
    project = models.CharField(max_length=64, blank=True, help_text="Vertex: the GCP project.")
    # Platform credentials (AWS access keys, a service-account key file) as one sealed JSON
    # object; empty = the platform's standard chain (AWS) or Application Default Credentials.
    secrets_encrypted = models.TextField(blank=True, editable=False)
    secrets_hint = models.CharField(max_length=200, blank=True, editable=False)
    model_ids = models.JSONField(
        default=dict,
        blank=True,
        help_text="Catalog model id → this platform's model id, over the shipped defaults.",
    )
    weight = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1)])
    enabled = models.BooleanField(default=True)
    max_concurrency = models.PositiveIntegerField(default=100, validators=[MinValueValidator(1)])
    fair_share = models.FloatField(
        default=0.5,
        validators=[MinValueValidator(0.01), MaxValueValidator(1.0)],
        help_text=(
            "The most of max_concurrency one organization may hold while another is active "
            "on this deployment (holds a slot or was refused one recently); 1 = no share rule."
        ),
    )
    # Provider switches that are not credentials (catalog/platform_config.py OPTIONS says which):
    # e.g. {"max_tokens_param": "max_tokens"} for a server that predates max_completion_tokens.
    options = models.JSONField(default=dict, blank=True, help_text="Provider options (JSON).")
    serves_all_models = models.BooleanField(
        default=True, help_text="Serve every catalog model (upstream id = id without provider/)."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def set_api_key(self, plaintext: str) -> None:
        self.api_key_encrypted = crypto.encrypt(plaintext)
        self.api_key_hint = crypto.hint(plaintext)

    def get_api_key(self) -> str:
        return crypto.decrypt(self.api_key_encrypted) if self.api_key_encrypted else ""

    def set_secrets(self, secrets: dict[str, str]) -> None:
        """Seal the platform credentials; the hint names them without revealing them."""
        self.secrets_encrypted = crypto.encrypt(json.dumps(secrets)) if secrets else ""
        hints = []
        if secrets.get("aws_access_key_id"):
            hints.append("AWS key " + crypto.hint(secrets["aws_access_key_id"]))
        if secrets.get("service_account_json"):
            email = json.loads(secrets["service_account_json"]).get("client_email", "")
            hints.append(f"service account {email}")
        self.secrets_hint = "; ".join(hints)[:200]

    def get_secrets(self) -> dict[str, str]:
        if not self.secrets_encrypted:
            return {}
        value = json.loads(crypto.decrypt(self.secrets_encrypted))
        return value if isinstance(value, dict) else {}


class DeploymentModel(models.Model):
    """A model served by a deployment, with the id the provider knows it by."""

    deployment = models.ForeignKey(Deployment, on_delete=models.CASCADE, related_name="models")
    model = models.ForeignKey(Model, on_delete=models.CASCADE, related_name="deployments")
    upstream_model_id = models.CharField(max_length=128, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["deployment", "model"], name="uniq_deployment_model")
        ]

    def __str__(self) -> str:
        return f"{self.deployment} → {self.model}"

    @property
    def effective_upstream_id(self) -> str:
        return self.upstream_model_id or self.model.default_upstream_id


class CatalogVersion(models.Model):
    """A single row whose counter moves on every catalog edit; processes poll it to reload."""

    version = models.BigIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"catalog v{self.version}"


class SuggestedChain(models.Model):
    """A chain of models the catalog suggests: for a model, the alternatives to try after it;
    for ezat/auto, the models it resolves to unless an org configured its own.

    Suggestions are offered on the dashboard; a model's suggestion is never applied to an org
    that did not turn it on (ezat/auto's is its default, that being what the model is).
    """

    model = models.CharField(max_length=128, unique=True, help_text="A model id, or ezat/auto.")
    model_ids = models.JSONField(default=list, help_text="Ordered model ids.")
    why = models.TextField(help_text="Why these alternatives (shown with the suggestion).")
    source_url = models.URLField(max_length=500, blank=True)
    checked_on = models.DateField(null=True, blank=True)
    sort_order = models.IntegerField(default=0)

    class Meta:
        ordering = ["sort_order", "model"]

    def __str__(self) -> str:
        return f"{self.model} → {', '.join(self.model_ids)}"

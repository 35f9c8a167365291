"""Organisations, their members and their API keys."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import models
from django.db.models.functions import Lower
from django.utils import timezone


class Organization(models.Model):
    """A customer. `balance_nano` mirrors Σ ledger and changes only with a ledger row."""

    name = models.CharField(max_length=100, unique=True)
    balance_nano = models.BigIntegerField(default=0, editable=False)
    max_concurrency = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Requests in flight across the organization's keys; empty = the default.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            # `acme` and `Acme` are one tenant: a second one would split its keys and billing.
            models.UniqueConstraint(
                Lower("name"),
                name="org_name_unique_ignoring_case",
                violation_error_message=(
                    "An organization with this name already exists (names are compared "
                    "ignoring case)."
                ),
            ),
        ]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    class Role(models.TextChoices):
        OWNER = "owner", "Owner"
        MEMBER = "member", "Member"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "org"], name="uniq_membership")]

    def __str__(self) -> str:
        return f"{self.user} in {self.org} ({self.role})"


class ApiKey(models.Model):
    """An inference key. The secret is shown once; only its SHA-256 is kept."""

    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=20, editable=False)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    rpm_limit = models.PositiveIntegerField(
        null=True, blank=True, help_text="Requests per minute; empty = the default."
    )
    max_concurrency = models.PositiveIntegerField(
        null=True, blank=True, help_text="Requests in flight; empty = the default."
    )

    class CapPeriod(models.TextChoices):
        MONTH = "month", "Per calendar month (UTC)"
        DAY = "day", "Per day (UTC)"
        TOTAL = "total", "In total"

    spend_cap_nano = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="Spend cap in nano-USD per `spend_cap_period`; empty = none.",
    )
    spend_cap_period = models.CharField(
        max_length=8,
        choices=CapPeriod.choices,
        default=CapPeriod.MONTH,
        help_text="What the spend cap counts: a UTC calendar month, a UTC day, or all time.",
    )
    allowed_models = models.JSONField(
        default=list,
        blank=True,
        help_text="Canonical catalog model ids this key may call; empty = every model.",
    )
    allowed_ips = models.JSONField(
        default=list,
        blank=True,
        help_text="CIDRs the key may be used from (e.g. 203.0.113.0/24); empty = anywhere.",
    )
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="After this instant the key is refused; empty = never."
    )
    disabled_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Set while the key is disabled (reversible, unlike revoking).",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name or 'unnamed'})"

    @property
    def is_active(self) -> bool:
        """Not revoked (a disabled or expired key is still active: it can be changed)."""
        return self.revoked_at is None

    @property
    def is_disabled(self) -> bool:
        return self.disabled_at is not None

    def is_expired(self, now: datetime | None = None) -> bool:
        return self.expires_at is not None and self.expires_at <= (now or timezone.now())

    @property
    def state(self) -> str:
        """ "revoked", "disabled", "expired" or "active" (the first that applies)."""
        if self.revoked_at is not None:
            return "revoked"
        if self.disabled_at is not None:
            return "disabled"
        if self.is_expired():
            return "expired"
        return "active"


class ManagementKey(models.Model):
    """A key for the management API (scripts), separate from inference keys; owners only."""

    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="management_keys")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=20, editable=False)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name or 'unnamed'})"


class FallbackPolicy(models.Model):
    """An org's default fallback chain for one model: the models tried, in order, when that
    model cannot answer a request that did not bring its own list. For ezat/auto, the models
    it resolves to for this org. No row: no fallbacks (ezat/auto: the catalog's chain)."""

    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="fallbacks")
    model_id = models.CharField(max_length=128, help_text="A catalog model id, or ezat/auto.")
    fallbacks = models.JSONField(default=list, help_text="Ordered catalog model ids.")
    updated_at = models.DateTimeField(auto_now=True)
    updated_by = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["model_id"]
        constraints = [
            models.UniqueConstraint(fields=["org", "model_id"], name="uniq_fallback_policy")
        ]

    def __str__(self) -> str:
        return f"{self.org}: {self.model_id} → {', '.join(self.fallbacks)}"


class Invitation(models.Model):
    """An owner's invitation of an e-mail address into an org, accepted by the invitee.

    Nobody joins an org without consent: the invitee accepts from their dashboard (invitations to
    their account's address are listed there) or from the signed link in the e-mail. Timestamps
    come from `accounts.invitations.now` (a clock tests can move), not `auto_now_add`.
    """

    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField(max_length=254, help_text="Stored lower-case.")
    role = models.CharField(
        max_length=10, choices=Membership.Role.choices, default=Membership.Role.MEMBER
    )
    invited_by = models.CharField(
        max_length=150, blank=True, help_text="Who sent it: a username or a management key."
    )
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["email"], name="invitation_email")]

    def __str__(self) -> str:
        return f"{self.email} → {self.org} ({self.role})"

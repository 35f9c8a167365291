"""Writes to money: credits, ledger entries. (Reconciliation lives in billing/reconcile.py.)"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from django.db import transaction
from django.db.models import F

from accounts.models import Organization
from billing.models import LedgerEntry
from core.audit import audit

CreditListener = Callable[[int, int], None]  # (org id, amount in nano-USD)

# The live limiter learns of new money at once. It lives in the gateway, which sits above billing,
# so gateway/apps.py hands the listener down at start-up (billing never imports gateway); every
# process has the gateway app installed. Without one, the limiter's periodic reseed still finds
# the credit in the database.
_credit_listener: CreditListener | None = None


def set_credit_listener(listener: CreditListener | None) -> None:
    global _credit_listener
    _credit_listener = listener


class BillingError(ValueError):
    """Bad input to a money operation; the message is shown to the operator."""


@transaction.atomic
def grant_credit(
    *,
    org: Organization,
    amount_nano: int,
    memo: str = "",
    reference: str | None = None,
    created_by: str = "",
) -> LedgerEntry:
    """Add prepaid credit: a ledger row and the balance move in one transaction.

    `reference` makes a retried grant idempotent (a second call with the same reference fails
    on the unique constraint instead of crediting twice).
    """
    if amount_nano <= 0:
        raise BillingError("amount must be positive")
    entry = LedgerEntry.objects.create(
        org=org,
        kind=LedgerEntry.Kind.CREDIT,
        amount_nano=amount_nano,
        reference=reference or f"credit:{uuid.uuid4()}",
        memo=memo,
        created_by=created_by,
    )
    Organization.objects.filter(pk=org.pk).update(balance_nano=F("balance_nano") + amount_nano)
    audit(
        "credit.grant",
        org_id=org.pk,
        amount_nano=amount_nano,
        reference=entry.reference,
        created_by=created_by,
    )
    listener = _credit_listener
    if listener is not None:
        transaction.on_commit(lambda: listener(org.pk, amount_nano))
    return entry

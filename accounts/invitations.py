"""Invitation links, the clock they expire by, and their e-mail.

The link carries the invitation's id signed with `django.core.signing` (salted, timestamped);
nothing secret is stored. It expires after INVITATION_TTL twice over: the signature's own age
(real time) and the row's `expires_at` (checked against `now()`, which tests replace to move
time instead of sleeping). Revocation and acceptance live on the row.

Delivery runs on one background thread, so answering an owner costs the same whether the
address belongs to an account, to nobody, or to a staff account (whose invitations are composed
like any other and then not sent): the response cannot be used to enumerate accounts.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

from django.conf import settings
from django.core import signing
from django.core.mail import EmailMessage
from django.http import HttpRequest
from django.utils import timezone
from prometheus_client import Counter

logger = logging.getLogger(__name__)

INVITATION_TTL = timedelta(days=7)
_SALT = "accounts.invitation"

MAIL_FAILURES = Counter(
    "ezat_invitation_mail_failures_total", "Invitation e-mails the backend failed to send."
)


def public_base_url(request: HttpRequest) -> str:
    """Where links in e-mails point: EZAT_PUBLIC_URL, else the inviting request's scheme and
    host (which Django has checked against ALLOWED_HOSTS)."""
    return settings.EZAT_PUBLIC_URL or request.build_absolute_uri("/")


def now() -> datetime:
    """The invitations' clock (tests replace it to move time)."""
    return timezone.now()


class InvalidLink(Exception):
    """The link was tampered with or is not an invitation link."""


class ExpiredLink(Exception):
    """The link's signature is older than INVITATION_TTL."""


def make_token(invitation_id: int) -> str:
    return signing.dumps({"i": invitation_id}, salt=_SALT, compress=False)


def read_token(token: str) -> int:
    """The invitation id a link names; raises InvalidLink or ExpiredLink."""
    try:
        payload = signing.loads(token, salt=_SALT, max_age=INVITATION_TTL)
    except signing.SignatureExpired as exc:
        raise ExpiredLink(token) from exc
    except signing.BadSignature as exc:
        raise InvalidLink(token) from exc
    if not isinstance(payload, dict) or not isinstance(payload.get("i"), int):
        raise InvalidLink(token)
    return int(payload["i"])


def compose(
    *, to: str, org_name: str, role: str, inviter: str, link: str, expires_at: datetime
) -> EmailMessage:
    body = (
        f"{inviter or 'An owner'} invited you to join {org_name} on EZAT Router as {role}.\n\n"
        f"Accept the invitation (sign in first with the account you want to join with):\n"
        f"{link}\n\n"
        f"Or sign in and open Invitations in the dashboard. The invitation expires on "
        f"{expires_at:%Y-%m-%d %H:%M} UTC.\n\n"
        "If you did not expect this, ignore this e-mail: nothing happens unless you accept.\n"
    )
    return EmailMessage(
        subject=f"Invitation to {org_name} on EZAT Router",
        body=body,
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=[to],
    )


_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _mail_thread() -> ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ezat-mail")
        return _executor


def _send(message: EmailMessage | None) -> None:
    if message is None:  # not deliverable (a staff address): composed, never sent
        return
    try:
        message.send(fail_silently=False)
    except Exception:  # any backend error (SMTP, socket); the owner can re-invite
        MAIL_FAILURES.inc()
        domain = message.to[0].rsplit("@", 1)[-1]
        logger.exception("invitation e-mail not sent", extra={"to_domain": domain})


def deliver(message: EmailMessage, *, deliverable: bool) -> None:
    """Queue the e-mail on the mail thread (off the request path)."""
    _mail_thread().submit(_send, message if deliverable else None)


def flush(timeout: float = 30.0) -> None:
    """Wait until every queued e-mail has been handed to the backend (tests; shutdown)."""
    _mail_thread().submit(lambda: None).result(timeout=timeout)

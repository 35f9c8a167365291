"""Checks a deployment's base URL before it is saved (CLI, operator console, services).

One bad row must not take the service down: a URL the gateway's HTTP client cannot call (an
`ftp://` scheme, no host, a port out of range) is refused here with a message naming the field,
and anything that still fails at request time is an attempt failure (gateway/walk.py). The
checks are per URL and table-driven, so a deployment kind with other needs (a cloud platform's
regional endpoint) adds its own function to `CHECKS_BY_KIND` without touching these.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from urllib.parse import urlsplit

from django.core.exceptions import ValidationError

# The gateway's upstream client speaks HTTP/1.1 over TCP, with or without TLS (gateway/upstream.py).
SCHEMES = ("http", "https")

# RFC 1123 host names: labels of letters, digits and hyphens, not starting or ending with one.
_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def _invalid(message: str) -> ValidationError:
    return ValidationError(message, code="invalid_base_url")


def _check_host(host: str) -> None:
    try:
        ipaddress.ip_address(host)
        return
    except ValueError:
        pass
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError:
        raise _invalid(f"{host!r} is not a valid host name") from None
    labels = ascii_host.rstrip(".").split(".")
    if len(ascii_host) > 253 or not all(_LABEL.match(label) for label in labels):
        raise _invalid(f"{host!r} is not a valid host name")


def check_http_url(url: str) -> str:
    """An http(s) URL with a valid host and port and nothing the client would drop silently
    (credentials, a query, a fragment). Returns it without a trailing slash."""
    url = url.strip()
    if not url:
        raise _invalid("base URL is required")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        shown = f"{scheme}://" if scheme else "no scheme"
        raise _invalid(f"base URL must start with http:// or https:// (got {shown}): {url!r}")
    try:
        port = parts.port
    except ValueError:
        raise _invalid(f"base URL has an invalid port: {url!r}") from None
    if port == 0:
        raise _invalid(f"base URL has an invalid port: {url!r}")
    host = parts.hostname or ""
    if not host:
        raise _invalid(f"base URL has no host: {url!r}")
    if parts.username is not None or parts.password is not None:
        raise _invalid("base URL must not carry credentials; set the deployment's API key")
    if parts.query or parts.fragment:
        raise _invalid(f"base URL must not have a query or fragment: {url!r}")
    _check_host(host)
    return url.rstrip("/")


def check_optional_http_url(url: str) -> str:
    """Bedrock and Vertex derive their endpoint from the region when no base URL is given
    (catalog/platform_config.py); one that is given must still be callable."""
    return check_http_url(url) if url.strip() else ""


# Per deployment kind: the checks of its base URL. A kind not listed gets `check_http_url`.
CHECKS_BY_KIND: dict[str, Callable[[str], str]] = {
    "bedrock": check_optional_http_url,
    "vertex": check_optional_http_url,
}


def validate_base_url(url: str, kind: str | None = None) -> str:
    """The normalised base URL for a deployment of `kind`, or ValidationError saying why not."""
    return CHECKS_BY_KIND.get(kind or "", check_http_url)(url)

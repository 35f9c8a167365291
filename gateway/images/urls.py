from __future__ import annotations

# Static (pre-connect) checks of an image URL and of every redirect target.
#
# These checks give early, precise refusals and keep odd host spellings away from DNS, but
# they are NOT the SSRF boundary for host names: a name is only judged after resolution, on
# the address actually connected to (see network.py). For IP literals the check here is
# final: the same literal is what the socket connects to.
#
# One parser only: the URL is parsed once with httpx.URL and the components we validate
# are the components we connect with, so a parser differential cannot smuggle a host past
# the check.
import ipaddress
import re
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

import httpx

from gateway.images.addresses import (
    ends_in_number,
    is_allowed_address,
    parse_ipv4_literal,
)
from gateway.images.errors import (
    MESSAGE_BAD_REDIRECT,
    MESSAGE_BAD_SCHEME,
    MESSAGE_DOWNGRADE,
    MESSAGE_INVALID_URL,
    MESSAGE_USERINFO,
    AddressNotPublicError,
    InvalidImageURLError,
    PortNotAllowedError,
)

DEFAULT_PORTS: Final = {"http": 80, "https": 443}
# Either standard port with either scheme: http://host:443/ is odd but opens nothing that
# https://host/ does not. Everything else is refused so the gateway cannot be used to
# probe SMTP, Redis, admin panels... on public hosts. The loopback test switch lifts the
# restriction, and then only for loopback peers (enforced again at connect time).
ALLOWED_PORTS: Final = frozenset({80, 443})
MAX_URL_LENGTH: Final = 8192

# Host names after httpx's IDNA encoding: ASCII letters/digits/hyphen/underscore labels.
# Anything else ("%31%32%37.0.0.1", spaces, ...) could only mean trouble at the resolver.
_LABEL: Final = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
_HOSTNAME_RE: Final = re.compile(rf"(?:{_LABEL}\.)*{_LABEL}\.?")


def _is_hostname(host: str) -> bool:
    return len(host) <= 254 and _HOSTNAME_RE.fullmatch(host) is not None


@dataclass(frozen=True, slots=True)
class ImageTarget:
    """A URL that passed the static checks; what the downloader requests next."""

    url: httpx.URL
    port: int

    @property
    def is_https(self) -> bool:
        return self.url.scheme == "https"


def _check_literal_host(host: str, *, allow_loopback: bool) -> bool:
    """Judge IP-literal hosts. Returns True if `host` was a literal (and is acceptable)."""
    if ":" in host:  # httpx keeps IPv6 literals unbracketed in .host
        address_text, _, zone = host.partition("%")
        try:
            ipv6 = ipaddress.IPv6Address(address_text)
        except ValueError:
            raise InvalidImageURLError(MESSAGE_INVALID_URL) from None
        # A zone index ("fe80::1%25eth0") only exists for link-scoped addresses.
        if zone or not is_allowed_address(ipv6, allow_loopback=allow_loopback):
            raise AddressNotPublicError()
        return True
    if not ends_in_number(host):
        return False
    ipv4 = parse_ipv4_literal(host)
    if ipv4 is None:  # "1.2.3.4.5", "1.2.3.256": numeric but not an address → never DNS
        raise InvalidImageURLError(MESSAGE_INVALID_URL)
    if not is_allowed_address(ipv4, allow_loopback=allow_loopback):
        raise AddressNotPublicError()
    # Decimal, octal, hex and short forms are normalised above so that the refusal message
    # names the real problem, then refused even when public: no legitimate image URL needs
    # them, and connecting to the canonical address under a different Host is surprising.
    if host != str(ipv4):
        raise InvalidImageURLError(f"{MESSAGE_INVALID_URL} (non-canonical numeric host)")
    return True


def _message_for_unparsable(raw: str, *, allow_loopback: bool) -> str:
    """httpx rejects some numeric hosts ("0177.0.0.1"); say "not public" when that is why.

    Message cosmetics only — the URL is refused either way, so using a second parser here
    cannot open anything.
    """
    try:
        host = urlsplit(raw).hostname or ""
    except ValueError:
        return MESSAGE_INVALID_URL
    if host and ":" not in host and ends_in_number(host):
        ipv4 = parse_ipv4_literal(host)
        if ipv4 is not None and not is_allowed_address(ipv4, allow_loopback=allow_loopback):
            return AddressNotPublicError().message
    return MESSAGE_INVALID_URL


def check_url(url: httpx.URL, *, allow_loopback: bool) -> ImageTarget:
    """Scheme, credentials, host and port rules for an already parsed URL."""
    if url.scheme not in DEFAULT_PORTS:
        raise InvalidImageURLError(MESSAGE_BAD_SCHEME)
    if url.userinfo:
        raise InvalidImageURLError(MESSAGE_USERINFO)
    host = url.host
    if not host:
        raise InvalidImageURLError(MESSAGE_INVALID_URL)
    is_literal = _check_literal_host(host, allow_loopback=allow_loopback)
    if not is_literal and not _is_hostname(url.raw_host.decode("ascii", "replace")):
        raise InvalidImageURLError(MESSAGE_INVALID_URL)
    port = url.port if url.port is not None else DEFAULT_PORTS[url.scheme]
    if not 0 < port < 65536:
        raise InvalidImageURLError(MESSAGE_INVALID_URL)
    if port not in ALLOWED_PORTS and not allow_loopback:
        raise PortNotAllowedError()
    return ImageTarget(url=url, port=port)


def parse_image_url(raw: str, *, allow_loopback: bool) -> ImageTarget:
    """Parse and statically check a URL from the request body."""
    if not isinstance(raw, str) or len(raw) > MAX_URL_LENGTH:
        raise InvalidImageURLError(MESSAGE_INVALID_URL)
    try:
        url = httpx.URL(raw)
    except (httpx.InvalidURL, ValueError, TypeError):
        raise InvalidImageURLError(
            _message_for_unparsable(raw, allow_loopback=allow_loopback)
        ) from None
    if url.scheme not in DEFAULT_PORTS:
        raise InvalidImageURLError(MESSAGE_BAD_SCHEME)
    # httpx silently drops an empty userinfo ("http://@host/"); refuse any "@" in the
    # authority so that "looks like good.com" tricks are rejected consistently.
    if "@" in _raw_authority(raw):
        raise InvalidImageURLError(MESSAGE_USERINFO)
    return check_url(url, allow_loopback=allow_loopback)


def _raw_authority(raw: str) -> str:
    try:
        return urlsplit(raw).netloc
    except ValueError:
        return ""


def resolve_redirect(current: ImageTarget, location: str, *, allow_loopback: bool) -> ImageTarget:
    """The next hop of a redirect, checked exactly like a URL from the request.

    Relative Locations are resolved against the current URL (RFC 3986). HTTPS→HTTP is
    refused: the caller asked for an authenticated origin and a downgrade would let any
    on-path attacker substitute the image. HTTP→HTTPS is fine.
    """
    if not location or len(location) > MAX_URL_LENGTH:
        raise InvalidImageURLError(MESSAGE_BAD_REDIRECT)
    try:
        url = current.url.join(location)
    except (httpx.InvalidURL, ValueError, TypeError):
        raise InvalidImageURLError(
            _message_for_unparsable(location, allow_loopback=allow_loopback)
        ) from None
    if url.scheme not in DEFAULT_PORTS:
        raise InvalidImageURLError(MESSAGE_BAD_SCHEME)
    if "@" in _raw_authority(location):
        raise InvalidImageURLError(MESSAGE_USERINFO)
    target = check_url(url.copy_with(fragment=None), allow_loopback=allow_loopback)
    if current.is_https and not target.is_https:
        raise InvalidImageURLError(MESSAGE_DOWNGRADE)
    return target

"""A deployment's base URL is checked before it is saved (catalog/deployment_urls.py)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from catalog.deployment_urls import validate_base_url


@pytest.mark.parametrize(
    ("url", "normalised"),
    [
        ("https://api.anthropic.com", "https://api.anthropic.com"),
        ("https://api.anthropic.com/", "https://api.anthropic.com"),
        ("http://127.0.0.1:8787", "http://127.0.0.1:8787"),
        ("http://[::1]:8787/prefix/", "http://[::1]:8787/prefix"),
        ("HTTPS://Gateway.Example.COM/v1", "HTTPS://Gateway.Example.COM/v1"),
        ("https://bücher.example", "https://bücher.example"),
    ],
)
def test_urls_the_gateway_can_call_are_accepted(url: str, normalised: str) -> None:
    assert validate_base_url(url) == normalised


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ftp://example.com", "http:// or https://"),
        ("file:///etc/passwd", "http:// or https://"),
        ("example.com", "no scheme"),
        ("", "required"),
        ("http://", "no host"),
        ("https://h:99999", "port"),
        ("https://h:0", "port"),
        ("https://user:pw@h.example", "credentials"),
        ("https://h.example/?a=1", "query"),
        ("https://h.example/#top", "fragment"),
        ("https://bad_host!.example", "host name"),
        ("https://-lead.example", "host name"),
    ],
)
def test_urls_it_cannot_call_are_refused_saying_why(url: str, says: str) -> None:
    with pytest.raises(ValidationError, match=says):
        validate_base_url(url)

from __future__ import annotations

# Server-side download of http(s) image URLs for the OpenAI-compatible API, SSRF-safe.
#
# Public surface: ImageFetcher.fetch_all() turns [(param, url)] into base64 images or
# raises ImageFetchError(param, message), which the gateway renders as HTTP 400
# "{param}: {message}". Module map: addresses (which IPs are public, numeric host forms),
# urls (static URL and redirect checks), network (connect-time address vetting — the real
# SSRF boundary), content (magic bytes, size limits), fetcher (orchestration).
from gateway.images.addresses import is_public_address
from gateway.images.errors import ImageFetchError
from gateway.images.fetcher import (
    DEFAULT_POLICY,
    FetchedImage,
    ImageFetcher,
    ImageFetchPolicy,
)

__all__ = [
    "DEFAULT_POLICY",
    "FetchedImage",
    "ImageFetchError",
    "ImageFetchPolicy",
    "ImageFetcher",
    "is_public_address",
]

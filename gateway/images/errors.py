from __future__ import annotations

# Exceptions of the image downloader.
#
# `ImageFetchError` is the only one callers see. The internal `DownloadRefused` family is
# raised deep inside (URL checks, the guarded network backend, the body reader) where the
# request parameter name is unknown; `ImageFetcher` attaches the param at the edge.
from typing import Final

MESSAGE_NOT_PUBLIC: Final = "the address is not public"
MESSAGE_BAD_SCHEME: Final = "unsupported URL scheme"
MESSAGE_INVALID_URL: Final = "invalid image URL"
MESSAGE_USERINFO: Final = "URLs with user credentials are not allowed"
MESSAGE_PORT: Final = "only ports 80 and 443 are allowed"
MESSAGE_NOT_IMAGE: Final = "not a JPEG, PNG, GIF or WebP image"
MESSAGE_DOWNGRADE: Final = "redirect from HTTPS to HTTP is not allowed"
MESSAGE_BAD_REDIRECT: Final = "could not download the image (invalid redirect)"
MESSAGE_CONNECT_FAILED: Final = "could not download the image (connection failed)"
MESSAGE_CONNECTION_ERROR: Final = "could not download the image (connection error)"
MESSAGE_RESOLVE_FAILED: Final = "could not download the image (host name not found)"


class ImageFetchError(Exception):
    """A request part whose image could not be used; rendered as HTTP `status` (400, or 413
    when the request's images are too large together) with "{param}: {message}"."""

    def __init__(self, param: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.param = param
        self.message = message
        self.status = status

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"ImageFetchError(param={self.param!r}, message={self.message!r})"


class DownloadRefused(Exception):
    """Internal: a download was refused or failed; `message` is the user-facing text."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidImageURLError(DownloadRefused):
    """The URL is malformed, uses another scheme, carries credentials or a bad port."""


class AddressNotPublicError(DownloadRefused):
    """The host is, or resolved to, an address the policy forbids."""

    def __init__(self, message: str = MESSAGE_NOT_PUBLIC) -> None:
        super().__init__(message)


class PortNotAllowedError(DownloadRefused):
    """A non-standard port outside the loopback test mode."""

    def __init__(self, message: str = MESSAGE_PORT) -> None:
        super().__init__(message)


class HostResolutionError(DownloadRefused):
    """DNS gave no usable answer."""

    def __init__(self, message: str = MESSAGE_RESOLVE_FAILED) -> None:
        super().__init__(message)


class ImageContentError(DownloadRefused):
    """The response was not an acceptable image (status, size, budget, magic bytes)."""


class DownloadMemoryFull(DownloadRefused):
    """The bytes this process's downloads hold reached its image memory budget (a 503)."""

    def __init__(
        self, message: str = "image downloads are at this server's memory budget; retry shortly"
    ) -> None:
        super().__init__(message)

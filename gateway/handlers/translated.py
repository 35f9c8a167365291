"""What the two translated APIs (Chat Completions and Responses) share in their handlers:
model capabilities for the translators, the model name check, image URL inlining, the body per
deployment and upstream error events."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from django.conf import settings

from catalog.snapshot import ModelInfo, Route
from gateway.errors import GatewayError
from gateway.protocols.media import MediaTally
from gateway.protocols.openai.types import ImageRef, InvalidRequest, ModelCaps
from gateway.request_limits import max_request_bytes

if TYPE_CHECKING:
    from gateway.handlers.common import RequestScope
    from gateway.images import ImageFetcher
    from gateway.images.memory import MemoryLease

_fetcher: ImageFetcher | None = None


def image_fetcher() -> ImageFetcher:
    """One per process, created (and httpx/httpcore imported) on the first image URL: most
    gateway processes never download an image and should not carry the client in memory."""
    global _fetcher
    if _fetcher is None:
        from gateway.images import ImageFetcher, ImageFetchPolicy
        from gateway.images.memory import ImageMemoryBudget

        _fetcher = ImageFetcher(
            ImageFetchPolicy(allow_loopback=settings.EZAT_IMAGE_ALLOW_LOOPBACK),
            memory=ImageMemoryBudget(settings.EZAT_IMAGE_MEMORY_BUDGET),
        )
    return _fetcher


def caps(model: ModelInfo) -> ModelCaps:
    return ModelCaps(
        canonical_id=model.id,
        sampling=model.sampling,
        prompt_caching=model.prompt_caching,
        vision=model.vision,
        pdf=model.pdf,
        tools=model.tools,
        structured_outputs=model.structured_outputs,
        reasoning_efforts=model.reasoning_efforts,
        max_output_tokens=model.max_output_tokens,
        media=model.media,
        thinking_can_be_disabled=model.thinking_can_be_disabled,
        forced_tool_choice=model.forced_tool_choice,
    )


def model_name(body: object) -> str:
    if not isinstance(body, dict):
        raise GatewayError(400, "the request body must be a JSON object")
    name = body.get("model")
    if not isinstance(name, str) or not name.strip() or len(name) > 128:
        raise GatewayError(400, "model: required, a string of 1 to 128 characters", param="model")
    return name


def invalid(exc: InvalidRequest) -> GatewayError:
    return GatewayError(exc.status, exc.message, param=exc.param, code=exc.code)


async def inline_images(
    images: list[ImageRef],
    model: ModelInfo,
    media: MediaTally,
    body_bytes: int,
    scope: RequestScope,
) -> None:
    """Download image URLs (SSRF-safe) into their blocks; each one's real size bounds its
    tokens in `media` (the hold). Downloads stop (413) once the request, `body_bytes` plus the
    images base64-encoded, could no longer fit under the provider's request size limit."""
    if not images:
        return
    from gateway.images import ImageFetchError

    # What still fits under the largest provider request size once base64-encoded (4/3).
    allowance = None
    if model.routes:
        room = max(max_request_bytes(r.deployment.kind) for r in model.routes)
        allowance = (room - body_bytes) * 3 // 4
    fetcher = image_fetcher()
    lease = await _reserve_image_memory(fetcher, len(images), allowance)
    scope.at_end.append(lease.release)  # the images live in the body until the request ends
    try:
        fetched = await fetcher.fetch_all(
            [(ref.param, ref.url) for ref in images], max_total_bytes=allowance
        )
    except ImageFetchError as exc:
        if exc.status == 503:  # the process's download memory is full: retry shortly
            raise GatewayError(
                503,
                f"{exc.param}: {exc}",
                param=exc.param,
                type_="overloaded_error",
                headers={"retry-after": "2"},
            ) from None
        raise GatewayError(exc.status, f"{exc.param}: {exc}", param=exc.param) from None
    lease.shrink_to(sum(len(image.data_b64) for image in fetched))
    for ref, image in zip(images, fetched, strict=True):
        ref.block["source"] = {
            "type": "base64",
            "media_type": image.media_type,
            "data": image.data_b64,
        }
        media.add_image(model.media, image.size)


async def _reserve_image_memory(
    fetcher: ImageFetcher, count: int, allowance: int | None
) -> MemoryLease:
    """This request's worst case in the process's image memory budget (base64-encoded), or a
    503 when it stays full for EZAT_IMAGE_MEMORY_WAIT seconds."""
    from gateway.images.memory import ImageMemoryBusy

    policy = fetcher.policy
    worst = min(count * policy.max_bytes_per_image, policy.max_total_bytes)
    if allowance is not None:
        worst = min(worst, max(allowance, 0))
    try:
        return await fetcher.memory.reserve(
            -(-worst * 4 // 3), wait_s=settings.EZAT_IMAGE_MEMORY_WAIT
        )
    except ImageMemoryBusy:
        raise GatewayError(
            503,
            "image downloads are at this server's memory budget; retry shortly",
            type_="overloaded_error",
            headers={"retry-after": "2"},
        ) from None


def upstream_body(body: dict[str, Any], route: Route) -> bytes:
    body["model"] = route.upstream_model_id
    return orjson.dumps(body)


def error_from_event(data: dict[str, Any]) -> GatewayError:
    error = data.get("error") or {}
    status = 529 if error.get("type") == "overloaded_error" else 500
    return GatewayError(status, str(error.get("message") or "upstream error"))

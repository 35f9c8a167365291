"""Management API for an org's model fallback chains (issue 20): the default policy that applies
when a request brings no list of its own, and ezat/auto's chain for the org.

- `GET  /orgs/{org_id}/fallbacks`: the org's chains, and the catalog's suggestions (offered,
  never applied unless the org sets them).
- `GET|PUT|DELETE /orgs/{org_id}/fallbacks/{model}`: one model's chain (the id holds a `/`).
  Members read; owners (and management keys) write. An empty list turns the chain off.

Every gateway process applies a change within EZAT_KEY_CACHE_TTL seconds.
"""

from __future__ import annotations

import logging

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from accounts import selectors, services
from accounts.api.base import OrgScopedAPIView, actor, parse_body
from accounts.api.serializers import StrictInputSerializer
from accounts.models import FallbackPolicy
from catalog.chains import AUTO_MODEL_ID, MAX_CHAIN_MODELS, is_auto
from catalog.selectors import suggested_chain_rows

logger = logging.getLogger(__name__)

NO_CHAIN = "no fallback chain for this model"


class FallbackPolicySerializer(serializers.Serializer):
    model = serializers.CharField(
        source="model_id", read_only=True, help_text=f"A catalog model id, or {AUTO_MODEL_ID}."
    )
    fallbacks = serializers.ListField(
        child=serializers.CharField(),
        read_only=True,
        help_text=(
            "Model ids tried in order when the model cannot answer (for ezat/auto: the models "
            "it resolves to)."
        ),
    )
    updated_at = serializers.DateTimeField(read_only=True)
    updated_by = serializers.CharField(read_only=True)


class SuggestionSerializer(serializers.Serializer):
    model = serializers.CharField(read_only=True)
    fallbacks = serializers.ListField(
        source="model_ids", child=serializers.CharField(), read_only=True
    )
    why = serializers.CharField(read_only=True)
    source_url = serializers.CharField(read_only=True)


class FallbackListSerializer(serializers.Serializer):
    chains = FallbackPolicySerializer(many=True, read_only=True)
    suggestions = SuggestionSerializer(
        many=True,
        read_only=True,
        help_text="The catalog's suggestions: offered, applied only if you set them.",
    )


class FallbackPolicyUpdateSerializer(StrictInputSerializer):
    fallbacks = serializers.ListField(
        child=serializers.JSONField(),
        max_length=MAX_CHAIN_MODELS + 1,  # one more, so the service names the entry too many
        help_text=(
            f"At most {MAX_CHAIN_MODELS} model ids (or aliases), each once; [] turns the chain "
            "off (for ezat/auto: back to the catalog's chain)."
        ),
    )


class FallbackListView(OrgScopedAPIView):
    """The org's fallback chains and the catalog's suggestions."""

    pagination_class = None

    @extend_schema(
        operation_id="fallbacks_list",
        summary="Model fallback chains",
        tags=["fallbacks"],
        responses=FallbackListSerializer,
    )
    def get(self, request: Request, org_id: int) -> Response:
        body = {
            "chains": FallbackPolicySerializer(selectors.org_fallbacks(self.org), many=True).data,
            "suggestions": SuggestionSerializer(suggested_chain_rows(), many=True).data,
        }
        return Response(body)


class FallbackDetailView(OrgScopedAPIView):
    """One model's chain. Members read; owners set or clear it."""

    serializer_class = FallbackPolicyUpdateSerializer  # describes PUT in OPTIONS responses
    pagination_class = None

    def _policy(self, model: str) -> FallbackPolicy:
        policy = selectors.org_fallback(self.org, _canonical(model))
        if policy is None:
            raise NotFound(NO_CHAIN)
        return policy

    @extend_schema(
        operation_id="fallbacks_retrieve",
        summary="One model's fallback chain",
        tags=["fallbacks"],
        responses=FallbackPolicySerializer,
    )
    def get(self, request: Request, org_id: int, model: str) -> Response:
        return Response(FallbackPolicySerializer(self._policy(model)).data)

    @extend_schema(
        operation_id="fallbacks_update",
        summary="Set a model's fallback chain (owners)",
        description="Replaces the chain; `[]` turns it off.",
        tags=["fallbacks"],
        request=FallbackPolicyUpdateSerializer,
        responses={
            200: FallbackPolicySerializer,
            204: OpenApiResponse(description="Turned off."),
        },
    )
    def put(self, request: Request, org_id: int, model: str) -> Response:
        data = parse_body(FallbackPolicyUpdateSerializer, request)
        try:
            policy = services.set_fallbacks(
                org=self.org, model=model, fallbacks=data["fallbacks"], actor=actor(request)
            )
        except services.AccountsError as exc:
            field = "model" if str(exc).startswith("model:") else "fallbacks"
            raise ValidationError({field: [str(exc)]}) from exc
        logger.info(
            "fallback chain set",
            extra={"org_id": self.org.pk, "model": model, "actor": actor(request)},
        )
        if policy is None:
            return Response(status=status.HTTP_204_NO_CONTENT)
        return Response(FallbackPolicySerializer(policy).data)

    @extend_schema(
        operation_id="fallbacks_destroy",
        summary="Turn a model's fallback chain off (owners)",
        tags=["fallbacks"],
        responses={204: OpenApiResponse(description="Off (idempotent).")},
    )
    def delete(self, request: Request, org_id: int, model: str) -> Response:
        services.clear_fallbacks(org=self.org, model=model)
        logger.info(
            "fallback chain cleared",
            extra={"org_id": self.org.pk, "model": model, "actor": actor(request)},
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


def _canonical(model: str) -> str:
    """The stored id for a model named by id or alias (ezat/auto as is)."""
    if is_auto(model):
        return AUTO_MODEL_ID
    names = selectors.catalog_model_names()
    return names.get(model.strip().lower(), model.strip())

"""Every catalog edit moves CatalogVersion, which every process polls to reload its snapshot."""

from __future__ import annotations

from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from catalog.models import (
    Deployment,
    DeploymentModel,
    Model,
    ModelAlias,
    PriceTier,
    PriceVersion,
    SuggestedChain,
)
from catalog.services import bump_catalog_version

_WATCHED = (
    Model,
    ModelAlias,
    PriceVersion,
    PriceTier,
    Deployment,
    DeploymentModel,
    SuggestedChain,
)


@receiver(post_save)
@receiver(post_delete)
def _catalog_changed(sender: type, **kwargs: object) -> None:
    if sender in _WATCHED and not kwargs.get("raw"):
        bump_catalog_version()

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path, re_path

from catalog import views as catalog_views
from ezat import health, views

admin.autodiscover()  # settings use SimpleAdminConfig: discovery happens here, on first use

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/models", catalog_views.models_catalog, name="api-models"),
    path("api/v1/", include("ezat.api_urls")),
    path("healthz", health.healthz, name="healthz"),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", health.metrics, name="metrics"),
    # Reached only without the ASGI dispatcher (runserver): a JSON 404 saying what to run.
    re_path(r"^(?:openai/)?v1/(?P<rest>.*)$", views.api_needs_asgi, name="api-needs-asgi"),
    path("", include("ezat.dashboard_urls")),
]

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path, re_path
from django.views.generic import RedirectView

from catalog import views as catalog_views
from ezat import health, views

admin.autodiscover()  # settings use SimpleAdminConfig: discovery happens here, on first use
admin.site.site_header = "EZAT Router operator console"
admin.site.site_title = "EZAT Router operator console"
admin.site.index_title = "Operations"
# The change lists need the width (the usage-record list did not fit beside the app sidebar).
admin.site.enable_nav_sidebar = False

urlpatterns = [
    # Signing out of the admin returns to the admin's sign-in (LOGOUT_REDIRECT_URL is the
    # customers' login). Same path as the admin's own logout, matched first.
    path(
        "admin/logout/",
        auth_views.LogoutView.as_view(next_page="admin:login"),
        name="admin-logout",
    ),
    path("admin/", admin.site.urls),
    path("api/models", catalog_views.models_catalog, name="api-models"),
    path("api/v1/", include("ezat.api_urls")),
    path("healthz", health.healthz, name="healthz"),
    # Browsers ask for /favicon.ico whatever the page says; the icon is one SVG in static/.
    path("favicon.ico", RedirectView.as_view(url=static("ezat/favicon.svg"), permanent=True)),
    path("readyz", health.readyz, name="readyz"),
    path("metrics", health.metrics, name="metrics"),
    # Reached only without the ASGI dispatcher (runserver): a JSON 404 saying what to run.
    re_path(r"^(?:openai/)?v1/(?P<rest>.*)$", views.api_needs_asgi, name="api-needs-asgi"),
    path("", include("ezat.dashboard_urls")),
]

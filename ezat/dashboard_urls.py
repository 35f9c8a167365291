"""Customer dashboard routes: sign-in/out at the root, pages under /dashboard/.

Accounts and billing pages share one `dashboard` namespace so templates link with
`{% url 'dashboard:keys' %}` whichever app serves the page.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView

from accounts import urls as accounts_urls
from alerts import urls as alerts_urls
from billing import urls as billing_urls
from playground import urls as playground_urls

dashboard_patterns = [
    *billing_urls.urlpatterns,
    *accounts_urls.urlpatterns,
    *playground_urls.urlpatterns,
    *alerts_urls.urlpatterns,
]

urlpatterns: list = [
    path(
        "login/",
        auth_views.LoginView.as_view(redirect_authenticated_user=True),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("dashboard/", include((dashboard_patterns, "dashboard"))),
    path("", RedirectView.as_view(url=settings.LOGIN_REDIRECT_URL, permanent=False)),
]

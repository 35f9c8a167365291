"""Dashboard routes for keys, members and the org switcher (mounted under /dashboard/)."""

from __future__ import annotations

from django.urls import path

from accounts import fallback_views, invitation_views, management_key_views, views

urlpatterns = [
    path("org/", views.switch_org, name="switch-org"),
    path("keys/", views.keys_list, name="keys"),
    path("keys/new/", views.key_create, name="key-create"),
    path("keys/<int:key_id>/created/", views.key_created, name="key-created"),
    path("keys/<int:key_id>/edit/", views.key_edit, name="key-edit"),
    path("keys/<int:key_id>/revoke/", views.key_revoke, name="key-revoke"),
    path("keys/<int:key_id>/disable/", views.key_disable, name="key-disable"),
    path("keys/<int:key_id>/enable/", views.key_enable, name="key-enable"),
    path("management-keys/", management_key_views.management_keys, name="management-keys"),
    path(
        "management-keys/<int:key_id>/created/",
        management_key_views.management_key_created,
        name="management-key-created",
    ),
    path(
        "management-keys/<int:key_id>/revoke/",
        management_key_views.management_key_revoke,
        name="management-key-revoke",
    ),
    path("fallbacks/", fallback_views.fallbacks_list, name="fallbacks"),
    path("fallbacks/<path:model>/edit/", fallback_views.fallback_edit, name="fallback-edit"),
    path("members/", views.members_list, name="members"),
    path("members/invite/", views.member_invite, name="member-invite"),
    path(
        "members/invitations/<int:invitation_id>/revoke/",
        views.invitation_revoke,
        name="invitation-revoke",
    ),
    path("invitations/", invitation_views.my_invitations, name="invitations"),
    path(
        "invitations/<int:invitation_id>/accept/",
        invitation_views.accept_mine,
        name="invitation-accept",
    ),
    path("invitations/join/<str:token>/", invitation_views.invitation_link, name="invitation-link"),
    path("members/<int:member_id>/role/", views.member_role, name="member-role"),
    path("members/<int:member_id>/remove/", views.member_remove, name="member-remove"),
]

"""The management API (`/api/v1/…`): organisations and their keys."""

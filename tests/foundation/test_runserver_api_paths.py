"""`manage.py runserver` serves Django only: the inference API paths answer a JSON 404 that says
to use `make run` or uvicorn, not an HTML page (issue 17, item 6)."""

from __future__ import annotations

import pytest
from django.test import Client


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("post", "/v1/messages"),
        ("post", "/openai/v1/chat/completions"),
        ("post", "/openai/v1/responses"),
        ("get", "/v1/models"),
        ("get", "/openai/v1/models"),
    ],
)
@pytest.mark.django_db
def test_api_paths_under_django_say_to_run_the_asgi_server(method: str, path: str) -> None:
    client = Client(enforce_csrf_checks=True)
    if method == "post":
        response = client.post(path, data="{}", content_type="application/json")
    else:
        response = client.get(path)
    assert response.status_code == 404
    assert response["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["type"] == "not_found_error"
    assert "make run" in error["message"] and "uvicorn" in error["message"]

"""A plain HTML reference for the management API, rendered server-side from its OpenAPI schema.

Swagger UI and ReDoc load their JavaScript from a CDN; this page needs nothing but the schema.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from django.utils.html import escape, format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.views import View
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.settings import patched_settings

METHODS = ("get", "post", "put", "patch", "delete")

STYLE = """
body{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#222}
h2{margin-top:2.5rem;border-bottom:1px solid #ddd}
.op{margin:1.25rem 0;padding:.75rem 1rem;border:1px solid #e3e3e3;border-radius:6px}
.m{display:inline-block;min-width:4.5rem;font-weight:600;text-transform:uppercase}
code{background:#f4f4f4;padding:0 .25rem;border-radius:3px}
table{border-collapse:collapse;margin:.5rem 0}td,th{padding:.2rem .6rem;text-align:left}
th{border-bottom:1px solid #ddd}
"""


class ApiDocsView(View):
    patterns: list[Any] | None = None  # set by `as_view(patterns=…)` in ezat.api_urls
    custom_settings: dict[str, Any] | None = None

    def get(self, request: HttpRequest) -> HttpResponse:
        with patched_settings(self.custom_settings):
            schema = SchemaGenerator(patterns=self.patterns).get_schema(request=None, public=True)
        return HttpResponse(render(schema))


def _parameters(op: dict[str, Any]) -> SafeString:
    params = op.get("parameters") or []
    if not params:
        return mark_safe("")
    rows = format_html_join(
        "",
        "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
        (
            (
                p["name"],
                p["in"],
                p.get("schema", {}).get("type", ""),
                p.get("description", ""),
            )
            for p in params
        ),
    )
    return format_html(
        "<table><tr><th>name</th><th>in</th><th>type</th><th></th></tr>{}</table>", rows
    )


def _operation(path: str, method: str, op: dict[str, Any]) -> SafeString:
    body = op.get("requestBody", {}).get("content", {}).get("application/json", {})
    ref = body.get("schema", {}).get("$ref", "").rsplit("/", 1)[-1]
    responses = ", ".join(sorted(op.get("responses", {})))
    return format_html(
        '<div class="op"><span class="m">{}</span> <code>{}</code> — {}<p>{}</p>{}{}'
        "<p>Responses: {}</p></div>",
        method,
        path,
        op.get("summary", ""),
        op.get("description", ""),
        _parameters(op),
        format_html("<p>Body: <code>{}</code> (see the schema)</p>", ref) if ref else "",
        responses,
    )


def render(schema: dict[str, Any]) -> str:
    by_tag: dict[str, list[SafeString]] = {}
    for path, item in schema.get("paths", {}).items():
        for method in METHODS:
            if method in item:
                op = item[method]
                tag = (op.get("tags") or ["other"])[0]
                by_tag.setdefault(tag, []).append(_operation(path, method, op))
    sections = "".join(
        format_html("<h2>{}</h2>{}", tag, mark_safe("".join(ops)))  # parts escaped above
        for tag, ops in by_tag.items()
    )
    info = schema.get("info", {})
    return (
        "<!doctype html><html><head><meta charset=utf-8>"
        f"<title>{escape(info.get('title', 'API'))}</title><style>{STYLE}</style></head><body>"
        f"<h1>{escape(info.get('title', 'API'))} "
        f"<small>{escape(info.get('version', ''))}</small></h1>"
        "<p>Authenticate with <code>Authorization: Bearer ezat_mk_…</code> (a management key) "
        "or a signed-in session. Machine-readable schema: "
        '<a href="schema?format=json">JSON</a> · <a href="schema?format=yaml">YAML</a>.</p>'
        f"{sections}</body></html>"
    )

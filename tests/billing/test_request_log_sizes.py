"""Issue 31 item 2: every label the gateway writes into the request log (and usage records) fits
its column. `api` held 16 characters and `responses_input_tokens` is 22: PostgreSQL refused those
rows, and with them their whole batch. The labels are read from the gateway's source, so a new
API with a longer name fails here, not in production."""

from __future__ import annotations

import re
from pathlib import Path

from billing import request_log
from billing.models import RequestLog, UsageRecord
from gateway import outcome

ROOT = Path(__file__).resolve().parents[2]
# Exchange(api="…") in the handlers, API = "…" constants, and the path table of gateway/outcome.py.
LABEL = re.compile(r"""\bapi="([A-Za-z0-9_]+)"|^API = "([A-Za-z0-9_]+)"$""", re.MULTILINE)


def _api_labels() -> set[str]:
    labels: set[str] = set()
    for path in (ROOT / "gateway").rglob("*.py"):
        for match in LABEL.finditer(path.read_text()):
            labels.add(match.group(1) or match.group(2))
    labels |= set(outcome.APIS.values())
    labels |= {outcome.api_of(p) for p in ("/v1/models", "/openai/v1/responses/x", "/nowhere")}
    return labels


def test_every_api_label_fits_its_columns_with_room_to_spare() -> None:
    labels = _api_labels()
    assert {"messages", "chat", "responses", "responses_input_tokens", "other"} <= labels
    longest = max(labels, key=len)
    for model in (RequestLog, UsageRecord):
        width = model._meta.get_field("api").max_length
        assert width is not None and len(longest) + 8 <= width, (model.__name__, longest, width)


def test_status_labels_fit_and_cut_text_matches_its_columns() -> None:
    for model in (RequestLog, UsageRecord):
        field = model._meta.get_field("status")
        assert max(len(value) for value, _ in field.choices) <= field.max_length
    # The writer cuts free text to these lengths: they must be the columns' own.
    for column, limit in request_log._CUT.items():
        width = RequestLog._meta.get_field(column)
        assert limit == (width.max_length or request_log.MAX_MESSAGE), column

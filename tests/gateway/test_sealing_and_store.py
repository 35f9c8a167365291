"""Sealed reasoning (AEAD bound to org and model) and stored responses: the batched insert,
deletion, expiry and the retention purge (service and Celery task)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st

from accounts.services import create_org
from gateway.models import StoredResponse
from gateway.protocols.openai.types import InvalidRequest
from gateway.sealing import Sealer
from gateway.selectors import stored_contexts, stored_response
from gateway.services import (
    delete_stored_response,
    insert_stored_responses,
    purge_expired_responses,
)
from gateway.tasks import purge_stored_responses

BLOCK = {"type": "thinking", "thinking": "Let me think.", "signature": "c2ln"}


@settings(max_examples=30, deadline=None)
@given(st.text(max_size=200), st.text(min_size=1, max_size=40))
def test_seal_round_trip_and_binding(thinking: str, signature: str) -> None:
    block = {"type": "thinking", "thinking": thinking, "signature": signature}
    blob = Sealer(1, "m").seal(block)
    assert Sealer(1, "m").open(blob, "p") == block
    for other in (Sealer(2, "m"), Sealer(1, "other")):
        with pytest.raises(InvalidRequest) as info:
            other.open(blob, "input[3].encrypted_content")
        assert info.value.param == "input[3].encrypted_content"


@pytest.mark.parametrize(
    "mangle",
    [
        lambda b: b[:-2] + ("AA" if b[-2:] != "AA" else "BB"),  # tag changed
        lambda b: b.replace("ezr1.", "ezr2."),  # not our format
        lambda b: "ezr1.***",  # not base64url
        lambda b: "ezr1.AAAA",  # too short
        lambda b: b[:40],  # truncated
    ],
)
def test_changed_or_malformed_blobs_are_refused(mangle) -> None:  # type: ignore[no-untyped-def]
    blob = Sealer(1, "m").seal(BLOCK)
    with pytest.raises(InvalidRequest) as info:
        Sealer(1, "m").open(mangle(blob), "input[0].encrypted_content")
    assert info.value.param == "input[0].encrypted_content"
    assert info.value.status == 400


def _row(org_id: int, response_id: str, *, days: int = 30, text: str = "a") -> dict[str, object]:
    now = timezone.now()
    return {
        "org_id": org_id,
        "response_id": response_id,
        "model_id": "m",
        "response": {"id": response_id, "text": text},
        "context": {"items": [], "output": [{"id": "msg_x_0"}]},
        "created_at": now,
        "expires_at": now + timedelta(days=days),
    }


@pytest.mark.django_db
def test_insert_replace_select_delete_and_purge() -> None:
    org, other = create_org(name="store-a"), create_org(name="store-b")
    insert_stored_responses([_row(org.pk, "resp_1"), _row(org.pk, "resp_old", days=-1)])
    # A reused request id: the latest response replaces the older one.
    insert_stored_responses([_row(org.pk, "resp_1", text="b")])
    assert stored_response(org.pk, "resp_1") == {"id": "resp_1", "text": "b"}
    assert stored_response(other.pk, "resp_1") is None  # another org
    assert stored_response(org.pk, "resp_old") is None  # expired
    assert set(stored_contexts(org.pk, ["resp_1", "resp_old"])) == {"resp_1"}
    assert purge_expired_responses(batch_size=1) == 1
    assert purge_expired_responses() == 0  # idempotent
    assert not delete_stored_response(org_id=other.pk, response_id="resp_1")
    assert delete_stored_response(org_id=org.pk, response_id="resp_1")
    assert StoredResponse.objects.count() == 0


@pytest.mark.django_db
def test_purge_task_deletes_expired_in_batches() -> None:
    org = create_org(name="store-c")
    insert_stored_responses([_row(org.pk, f"resp_{n}", days=-1) for n in range(5)])
    insert_stored_responses([_row(org.pk, "resp_live")])
    assert purge_stored_responses.apply(kwargs={"batch_size": 2}).get() == 5
    assert list(StoredResponse.objects.values_list("response_id", flat=True)) == ["resp_live"]

"""PDFs and text documents on an OpenAI-kind model (issue 30): a Messages document block goes
to Chat Completions as a `file` part (PDF) or text (plain text), the way OpenAI's file-inputs
guide takes them; Claude Code reading a PDF sends it inside a tool result. Driven with the
anthropic SDK, answers validated against its types; what reached the provider read off the
simulator, which refuses any file that is not a base64 PDF (simulator/openai_files.py)."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest
from anthropic.types import Message
from openai.types.responses import Response

from simulator.media import pdf_tokens
from tests.media_samples import b64, pdf
from tests.support.limits_billing_support import records_by_request
from tests.support.openai_lab import OpenAILab, make_openai_lab
from tests.support.stack import Stack
from tests.waiting import wait_for

pytestmark = pytest.mark.e2e

PDF_BYTES = pdf(3, "Quarterly figures")
PDF_SOURCE = {"type": "base64", "media_type": "application/pdf", "data": b64(PDF_BYTES)}
PDF_URL = "data:application/pdf;base64," + b64(PDF_BYTES)


@pytest.fixture(scope="module")
def lab(stack: Stack) -> OpenAILab:
    return make_openai_lab(stack)


@pytest.fixture
def client(lab: OpenAILab, e2e: Stack) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=lab.key.secret, base_url=e2e.url, max_retries=0)


def _record(stack: Stack, request_id: str) -> Any:
    return wait_for(
        lambda: records_by_request(stack, [request_id]).get(request_id),
        what=f"the usage record of {request_id}",
    )


def _ask(client: anthropic.Anthropic, lab: OpenAILab, content: Any) -> tuple[Message, Any]:
    raw = client.messages.with_raw_response.create(
        model=lab.model, max_tokens=50, messages=[{"role": "user", "content": content}]
    )
    message = raw.parse()
    Message.model_validate(message.model_dump())
    return message, _record(lab.stack, raw.headers["x-request-id"])


def test_a_pdf_goes_as_a_file_part_and_its_pages_are_billed(
    lab: OpenAILab, client: anthropic.Anthropic
) -> None:
    question = {"type": "text", "text": "What does it say?"}
    plain, plain_rec = _ask(client, lab, [question])
    document = {"type": "document", "source": PDF_SOURCE, "title": "figures.pdf"}
    message, rec = _ask(client, lab, [document, question])
    sent = lab.chat_requests()[-1]["body"]["messages"][-1]["content"]
    assert sent[0] == {"type": "file", "file": {"filename": "figures.pdf", "file_data": PDF_URL}}
    assert sent[1] == {"type": "text", "text": "What does it say?"}
    # The provider counted the PDF's pages (the simulator's price for this file), and EZAT
    # billed what the provider reported.
    assert message.usage.input_tokens - plain.usage.input_tokens == pdf_tokens(PDF_BYTES)
    assert rec.input_tokens == message.usage.input_tokens
    assert rec.cost_nano > plain_rec.cost_nano


def test_claude_code_reading_a_pdf_sends_it_after_the_tool_message(
    lab: OpenAILab, client: anthropic.Anthropic
) -> None:
    """Claude Code's Read tool answers a PDF with a document block inside the tool result."""
    tool = {
        "name": "Read",
        "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}},
    }
    call = {"type": "tool_use", "id": "toolu_01", "name": "Read", "input": {"file_path": "a.pdf"}}
    result = {
        "type": "tool_result",
        "tool_use_id": "toolu_01",
        "content": [{"type": "document", "source": PDF_SOURCE}],
    }
    raw = client.messages.with_raw_response.create(
        model=lab.model,
        max_tokens=50,
        tools=[tool],
        messages=[
            {"role": "user", "content": "read a.pdf"},
            {"role": "assistant", "content": [call]},
            {"role": "user", "content": [result]},
        ],
    )
    Message.model_validate(raw.parse().model_dump())
    sent = lab.chat_requests()[-1]["body"]["messages"]
    assert sent[-2] == {
        "role": "tool",
        "tool_call_id": "toolu_01",
        "content": "(the result is the file in the next user message)",
    }
    assert sent[-1] == {
        "role": "user",
        "content": [{"type": "file", "file": {"filename": "document-1.pdf", "file_data": PDF_URL}}],
    }


def test_a_text_document_goes_as_text(lab: OpenAILab, client: anthropic.Anthropic) -> None:
    source = {"type": "text", "media_type": "text/plain", "data": "line one\nline two"}
    _ask(client, lab, [{"type": "document", "source": source, "title": "notes.txt"}])
    sent = lab.chat_requests()[-1]["body"]["messages"][-1]
    assert sent == {"role": "user", "content": "notes.txt\n\nline one\nline two"}


def test_count_tokens_counts_the_pdfs_pages(lab: OpenAILab, client: anthropic.Anthropic) -> None:
    question = {"type": "text", "text": "summarise"}
    document = {"type": "document", "source": PDF_SOURCE}

    def count(content: list[dict[str, Any]]) -> int:
        messages = [{"role": "user", "content": content}]
        return client.messages.count_tokens(model=lab.model, messages=messages).input_tokens

    # Three letter pages, each an image (765) and the per-page text allowance (3,000).
    assert count([document, question]) - count([question]) == 3 * (765 + 3000)


@pytest.mark.parametrize(
    ("source", "param"),
    [
        ({"type": "url", "url": "https://example.com/a.pdf"}, "messages.0.content.0.source.type"),
        ({**PDF_SOURCE, "media_type": "application/msword"}, "source.media_type"),
    ],
    ids=["pdf-by-url", "not-a-pdf"],
)
def test_a_document_chat_cannot_take_is_a_400_naming_it_and_sent_nowhere(
    lab: OpenAILab, client: anthropic.Anthropic, source: dict[str, Any], param: str
) -> None:
    before = len(lab.chat_requests())
    with pytest.raises(anthropic.BadRequestError) as raised:
        client.messages.create(
            model=lab.model,
            max_tokens=50,
            messages=[{"role": "user", "content": [{"type": "document", "source": source}]}],
        )
    assert param in raised.value.message
    assert len(lab.chat_requests()) == before


def test_a_responses_input_file_reaches_chat_as_a_file_part(lab: OpenAILab, e2e: Stack) -> None:
    """The Responses API on the same model, translated (not relayed): `input_file` -> a document
    block -> a Chat `file` part. (The filename does not survive the document block, which has
    none: the part is named by its place.)"""
    client = openai.OpenAI(api_key=lab.key.secret, base_url=e2e.url + "/openai/v1", max_retries=0)
    response = client.responses.create(
        model=lab.model,
        max_output_tokens=50,
        store=False,
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_file", "filename": "figures.pdf", "file_data": PDF_URL},
                    {"type": "input_text", "text": "What does it say?"},
                ],
            }
        ],
    )
    Response.model_validate(response.model_dump())
    assert response.status == "completed"
    sent = lab.chat_requests()[-1]["body"]["messages"][-1]["content"]
    assert sent[0] == {"type": "file", "file": {"filename": "document-1.pdf", "file_data": PDF_URL}}

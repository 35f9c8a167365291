"""The simulated Chat Completions API takes base64 PDFs as `file` parts and refuses the rest,
naming the field (simulator/openai_files.py), as OpenAI's file-inputs guide says the real one
does; a PDF is priced by its pages like on the Anthropic front."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.media import pdf_tokens
from simulator.openai_files import check_file_part, file_part_tokens
from tests.media_samples import b64, pdf

PDF = pdf(2)
PDF_URL = "data:application/pdf;base64," + b64(PDF)


def part(**file: Any) -> dict[str, Any]:
    return {"type": "file", "file": file}


@pytest.mark.parametrize(
    "good",
    [part(file_data=PDF_URL, filename="a.pdf"), part(file_data=PDF_URL), part(file_id="file-abc")],
    ids=["data-and-name", "data", "file-id"],
)
def test_a_pdf_or_a_file_id_is_taken(good: dict[str, Any]) -> None:
    assert check_file_part(good, "messages[0].content[0]") is None


@pytest.mark.parametrize(
    ("bad", "param", "code"),
    [
        ({"type": "file"}, "messages[0].content[0].file", "missing_required_parameter"),
        (
            part(filename="a.pdf"),
            "messages[0].content[0].file.file_data",
            "missing_required_parameter",
        ),
        (
            part(file_url="https://x/a.pdf"),
            "messages[0].content[0].file.file_url",
            "unknown_parameter",
        ),
        (part(file_data=b64(PDF)), "messages[0].content[0].file.file_data", "invalid_value"),
        (
            part(file_data="data:text/plain;base64," + b64(b"hi")),
            "messages[0].content[0].file.file_data",
            "invalid_value",
        ),
        (
            part(file_data="data:application/pdf;base64," + b64(b"not a pdf")),
            "messages[0].content[0].file.file_data",
            "invalid_value",
        ),
        (
            part(file_data="data:application/pdf;base64,%%%"),
            "messages[0].content[0].file.file_data",
            "invalid_value",
        ),
        (part(file_id=7), "messages[0].content[0].file.file_id", "invalid_type"),
    ],
    ids=[
        "no-file",
        "no-data",
        "url",
        "raw-base64",
        "not-pdf-type",
        "not-pdf-bytes",
        "bad-b64",
        "id-type",
    ],
)
def test_anything_else_is_refused_naming_the_field(
    bad: dict[str, Any], param: str, code: str
) -> None:
    error = check_file_part(bad, "messages[0].content[0]")
    assert error is not None
    assert (error.status, error.param, error.code) == (400, param, code)


def test_a_pdf_costs_its_pages_as_on_the_anthropic_front() -> None:
    assert file_part_tokens(part(file_data=PDF_URL)) == pdf_tokens(PDF)
    assert file_part_tokens(part(file_data=PDF_URL)) > file_part_tokens(part(file_id="file-abc"))

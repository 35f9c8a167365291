"""The simulated Chat Completions API's `file` content parts: checked and counted.

OpenAI's file-inputs guide (https://developers.openai.com/api/docs/guides/file-inputs): "Chat
Completions accepts only PDF files as file content parts", as base64 data (`file_data`) or an
uploaded file's id (`file_id`); an external file URL is "Not supported". The part's fields are
openai-python 3.57.0's `ChatCompletionContentPartParam` `File`: `file: {file_data, file_id,
filename}`. The simulator takes `file_data` as the guide's example sends it, a
`data:application/pdf;base64,…` URL, and refuses anything else, so a gateway that forwards an
Anthropic document block, a URL or a non-PDF file fails here as it would there.

A PDF costs what the Anthropic side charges for the same file (simulator/media.py: pages and
shown text), so a test can compare both fronts; a file given by id counts as one blank page.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from simulator.media import pdf_tokens
from simulator.openai_errors import OpenAIError
from simulator.openai_wording import invalid_type, missing, unknown

_FILE_KEYS = frozenset({"file_data", "file_id", "filename"})
_PDF_DATA_URL = "data:application/pdf;base64,"


def check_file_part(part: Mapping[str, Any], at: str) -> OpenAIError | None:
    """Why the `file` part at `at` would be refused; None when it is a PDF the API takes."""
    file = part.get("file")
    if not isinstance(file, Mapping):
        return missing(f"{at}.file")
    extra = sorted(set(file) - _FILE_KEYS)
    if extra:
        return unknown(f"{at}.file.{extra[0]}")
    if "file_data" not in file and "file_id" not in file:
        return missing(f"{at}.file.file_data")
    for key in ("file_data", "file_id", "filename"):
        if key in file and not isinstance(file[key], str):
            return invalid_type(f"{at}.file.{key}", "a string", file[key])
    data = file.get("file_data")
    if data is not None and _pdf_bytes(data) is None:
        param = f"{at}.file.file_data"
        message = (
            f"Invalid file data: '{param}'. Expected a base64-encoded PDF "
            f"({_PDF_DATA_URL}...): Chat Completions takes PDF files only."
        )
        return OpenAIError(400, message, param, "invalid_value")
    return None


def file_part_tokens(part: Mapping[str, Any]) -> int:
    """Input tokens of a checked `file` part."""
    data = part["file"].get("file_data")
    pdf = _pdf_bytes(data) if isinstance(data, str) else None
    return pdf_tokens(pdf if pdf is not None else b"")


def _pdf_bytes(data: str) -> bytes | None:
    if not data.startswith(_PDF_DATA_URL):
        return None
    try:
        raw = base64.b64decode(data[len(_PDF_DATA_URL) :], validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if raw.startswith(b"%PDF-") else None

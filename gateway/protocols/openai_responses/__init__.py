"""OpenAI Responses API <-> Anthropic Messages translators (pure; docs/design.md, "Second wave")."""

from __future__ import annotations

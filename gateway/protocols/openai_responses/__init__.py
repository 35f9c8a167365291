"""OpenAI Responses API <-> Anthropic Messages translators (pure, see DESIGN.md "Second wave")."""

from __future__ import annotations

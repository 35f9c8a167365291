"""Shared fixtures. End-to-end fixtures (running gateway + simulator) live in tests/e2e/conftest.py."""

from __future__ import annotations

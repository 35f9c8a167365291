"""Pure protocol translation: dicts in, dicts (or bytes) out; no Django, no I/O, no clock."""

from __future__ import annotations

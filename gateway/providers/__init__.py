"""Upstream providers, one package each (issue 30): address, request builder, decoder, errors."""

"""`manage.py replay_request_log_quarantine`: insert the request-log rows the writer set aside
(billing/request_log_quarantine.py), once whatever made the database refuse them is fixed."""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from billing import request_log
from billing import request_log_quarantine as quarantine


class Command(BaseCommand):
    help = (
        "Insert the request-log rows the database refused (EZAT_REQUEST_LOG_QUARANTINE_DIR). "
        "Idempotent: a row already stored is skipped. Rows refused again stay in the "
        "quarantine, with the new reason; prints what was stored and what was kept."
    )

    def handle(self, *args: object, **options: object) -> None:
        try:
            with quarantine.replay_lock():
                stored, kept = self._replay()
        except quarantine.ReplayRunning as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"stored {stored} request-log row(s)")
        for label, count in sorted(kept.items()):
            self.stdout.write(f"kept {count} row(s) still refused: {label}")

    def _replay(self) -> tuple[int, Counter[str]]:
        stored = 0
        kept: Counter[str] = Counter()
        for path in quarantine.take():
            lines = list(quarantine.read(path))
            again: list[dict[str, Any]] = []
            for index, line in enumerate(lines):
                try:
                    request_log.insert_rows([request_log.db_row(quarantine.row_of(line))])
                except quarantine.INSERT_ERRORS as exc:
                    if not quarantine.refused(exc):
                        # The database is unreachable: nothing after this line was tried, so
                        # every line from here on goes back to the quarantine untouched.
                        quarantine.append([*again, *lines[index:]])
                        path.unlink()
                        raise CommandError(f"database unavailable, replay stopped: {exc}") from exc
                    again.append(
                        {**line, "reason": quarantine.reason(exc), "error": str(exc)[:500]}
                    )
                    kept[quarantine.reason(exc)] += 1
                else:
                    stored += 1
            if again:
                quarantine.append(again)
            path.unlink()
        return stored, kept

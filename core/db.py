"""Database connections of Django-served requests.

Why this exists: under ASGI, Django runs every request's synchronous code (middleware, views)
on a thread of its own (`asgiref.sync.ThreadSensitiveContext`, one per request), and Django's
connections are per thread. With `CONN_MAX_AGE` > 0 the end-of-request check
(`close_old_connections`) keeps a young connection open, but its thread is never used again:
every dashboard, `/api/v1` or `/readyz` request leaked one PostgreSQL session until garbage
collection (issue 13: a 30 s `/readyz` flood reached 105 sessions and "too many clients").
Django's docs say the same: "When using ASGI, persistent connections should be disabled"
(https://docs.djangoproject.com/en/5.2/ref/databases/#persistent-connections).

Chosen over psycopg's pool (`OPTIONS: {"pool": …}`, Django ≥ 5.1): the pool requires
`CONN_MAX_AGE = 0` for every thread, so the gateway's long-lived worker threads (key cache, limit
seeds, stored responses, catalog reloads) would check a pooled connection out and hold it idle
between their calls; a pool smaller than those threads plus concurrent dashboard requests stalls
them until the pool's timeout. Closing per request keeps what works: those worker threads are
few and long-lived (bounded pools), so their persistent connections (`DB_CONN_MAX_AGE`) are
bounded and reused, and a Django-served request holds a connection only while it runs.
"""

from __future__ import annotations

from typing import Any

from django.db import connections


def close_request_connections(**kwargs: Any) -> None:
    """`request_finished` receiver: close this thread's connections, whatever their age.

    It runs on the request's own thread (Django closes the response there). A connection inside
    an atomic block is left alone: that is a test wrapping requests in its transaction (Django's
    test client), never a served request, whose transactions end before the response does.
    """
    for conn in connections.all(initialized_only=True):
        if not conn.in_atomic_block:
            conn.close()

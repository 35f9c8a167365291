"""Settings for EZAT Router, read from the environment (and a local `.env`) via django-environ.

Unset `DATABASE_URL` / `REDIS_URL` give the embedded default: a SQLite file, in-process limits
and eager Celery tasks. Everything product-specific is an `EZAT_*` variable.
"""

from __future__ import annotations

import ipaddress
import os
import tempfile
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from core.secrets import check_secret_key

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
# The quickstart writes a generated SECRET_KEY here; real deployments use the environment.
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEBUG = env.bool("DEBUG", default=False)
SECRET_KEY = env.str("SECRET_KEY", default="")
check_secret_key(SECRET_KEY, debug=DEBUG)
if not SECRET_KEY:
    # Only reachable with DEBUG on: a throwaway key for local hacking.
    SECRET_KEY = "debug-only-" + "x" * 50

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["*"] if DEBUG else ["localhost", "127.0.0.1"])
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    # daphne is installed for Channels but not an app here: as one it only swaps `runserver`,
    # and importing it (Twisted) costs every gateway process ~15 MB.
    # Admin modules are discovered by ezat/urls.py when the URLconf loads, not at start-up: an
    # API-only worker never imports them (~1 MB less per worker).
    "django.contrib.admin.apps.SimpleAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "rest_framework",
    "drf_spectacular",
    "channels",
    "core.apps.CoreConfig",  # closes a Django-served request's DB connection (core/db.py)
    "accounts",
    "catalog",
    "gateway",
    "billing",
    "alerts",
    "playground",
    # The upstream simulator (test infrastructure, what `make run` and the suite start): an app
    # only for its `manage.py simulator` command; nothing in the product imports it.
    "simulator",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "core.audit.AuditActorMiddleware",
]

ROOT_URLCONF = "ezat.urls"
ASGI_APPLICATION = "ezat.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# --- Database ---------------------------------------------------------------------------------
SQLITE_PATH = env.str("EZAT_SQLITE_PATH", default=str(BASE_DIR / "ezat.sqlite3"))
DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{SQLITE_PATH}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # IMMEDIATE transactions + WAL + a busy timeout: the gateway writes usage rows from a thread
    # pool while the admin reads; without these SQLite answers "database is locked".
    DATABASES["default"]["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 30,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
    # Persistent connections: opening one (and its PRAGMAs) per usage insert cost more than the
    # insert itself.
    DATABASES["default"]["CONN_MAX_AGE"] = None
    # A file (not :memory:) so the gateway subprocesses in end-to-end tests share it; one per
    # test process so concurrent test runs on one machine never clobber each other's database.
    DATABASES["default"]["TEST"] = {
        "NAME": env.str(
            "EZAT_SQLITE_TEST_PATH",
            default=str(Path(tempfile.gettempdir()) / f"ezat-test-{os.getpid()}.sqlite3"),
        )
    }
else:
    # Persistent connections of the gateway's long-lived worker threads (few, bounded pools).
    # Django-served requests (dashboard, /api/v1, /readyz) close theirs when they end whatever
    # this says: under ASGI each runs on a thread of its own (core/db.py explains).
    DATABASES["default"]["CONN_MAX_AGE"] = env.int("DB_CONN_MAX_AGE", default=60)
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True

# DATABASE_URL is a pooler in transaction mode (PgBouncer `pool_mode = transaction`): every
# transaction may run on another server session, so nothing may outlive one. Django's own
# queries keep no session state (no prepared statements: Django leaves psycopg's prepare_threshold
# unset); this turns off the rest: server-side cursors (`.iterator()` declares WITH HOLD cursors
# in autocommit mode) and the usage writer's prepared INSERT and startup options (billing/pg_async).
DB_TRANSACTION_POOLING = env.bool("DB_TRANSACTION_POOLING", default=False)
if DB_TRANSACTION_POOLING and DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3":
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis, cache, channels, Celery -------------------------------------------------------------
REDIS_URL = env.str("REDIS_URL", default="")
# The start of every Redis key this installation writes: limits and holds, checkpoints,
# cooldowns, the routing prefix digest, the thinking store, signed kinds, the live dashboard's
# channel layer and Celery's broker (core/redis_clients.py `key_prefix`). Two installations on
# one Redis need two prefixes. EZAT_LIMITS_REDIS_PREFIX is its former name (it only reached the
# limiter and checkpoints), still read when this one is unset.
EZAT_REDIS_PREFIX = env.str(
    "EZAT_REDIS_PREFIX", default=env.str("EZAT_LIMITS_REDIS_PREFIX", default="ezat:")
)
# REDIS_URL names a node of a Redis Cluster (core/redis_clients.py): limits, holds, cooldowns,
# the thinking store and checkpoints go through redis-py's cluster client. The live dashboard's
# channel layer (channels_redis) and Celery's broker cannot use a cluster: they take their own
# URLs below.
EZAT_REDIS_CLUSTER = env.bool("EZAT_REDIS_CLUSTER", default=False)
# A plain Redis for the live dashboard's channel layer. Default: REDIS_URL, except in cluster
# mode, where it is unset and live updates reach only pages served by the same process.
EZAT_CHANNELS_REDIS_URL = env.str(
    "EZAT_CHANNELS_REDIS_URL", default="" if EZAT_REDIS_CLUSTER else REDIS_URL
)

if EZAT_CHANNELS_REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # channels_redis names its keys `<prefix><channel>` and `<prefix>:group:…` (default
            # "asgi"), and its flush deletes `<prefix>*`: hence "asgi" after the installation's
            # prefix, never the bare prefix (a flush would take every key of the installation).
            "CONFIG": {
                "hosts": [EZAT_CHANNELS_REDIS_URL],
                "prefix": f"{EZAT_REDIS_PREFIX}asgi",
            },
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

CELERY_BROKER_URL = env.str(
    "CELERY_BROKER_URL", default="" if EZAT_REDIS_CLUSTER else (REDIS_URL or "memory://")
)
if EZAT_REDIS_CLUSTER and not CELERY_BROKER_URL:
    raise ImproperlyConfigured(
        "EZAT_REDIS_CLUSTER=true needs CELERY_BROKER_URL (RabbitMQ or a plain Redis): "
        "Celery's broker cannot use a Redis Cluster"
    )
CELERY_RESULT_BACKEND = None
if CELERY_BROKER_URL.startswith(("redis://", "rediss://", "unix://")):
    # Kombu's Redis transport puts this before every key it writes (queues, bindings, unacked):
    # the broker's keys carry the installation's prefix like every other key. Workers and
    # senders read the same setting, so both agree on the names.
    CELERY_BROKER_TRANSPORT_OPTIONS = {"global_keyprefix": EZAT_REDIS_PREFIX}
# Without Redis there is no broker: run tasks in-process so the embedded default still reconciles.
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=not REDIS_URL)
CELERY_TASK_ACKS_LATE = True
# The queue tasks are sent to when none is named (tests run private workers on their own).
CELERY_TASK_DEFAULT_QUEUE = env.str("CELERY_TASK_DEFAULT_QUEUE", default="celery")
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BEAT_SCHEDULE = {
    "reconcile-usage": {
        "task": "billing.tasks.reconcile_usage",
        "schedule": env.float("EZAT_RECONCILE_INTERVAL", default=10.0),
    },
    "purge-stored-responses": {
        "task": "gateway.tasks.purge_stored_responses",
        "schedule": env.float("EZAT_RESPONSE_PURGE_INTERVAL", default=3600.0),
    },
    "evaluate-alerts": {
        "task": "alerts.tasks.evaluate_alerts",
        "schedule": env.float("EZAT_ALERT_INTERVAL", default=30.0),
    },
    "expire-playground-keys": {
        "task": "playground.tasks.revoke_expired_keys",
        "schedule": env.float("EZAT_PLAYGROUND_SWEEP_INTERVAL", default=300.0),
    },
    "purge-request-log": {
        "task": "billing.tasks.purge_request_log",
        "schedule": env.float("EZAT_REQUEST_LOG_PURGE_INTERVAL", default=3600.0),
    },
    # PostgreSQL: monthly partitions created ahead (billing/partitions.py); a no-op on SQLite.
    "ensure-partitions": {
        "task": "billing.tasks.ensure_partitions",
        "schedule": env.float("EZAT_PARTITION_INTERVAL", default=6 * 3600.0),
    },
}

# --- E-mail (invitations) -----------------------------------------------------------------------
# EMAIL_URL: `consolemail://` (default: printed by the server, as in `make run`), or
# `smtp+tls://user:password@host:587` etc. (django-environ's email_url).
vars().update(env.email_url("EMAIL_URL", default="consolemail://"))
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="EZAT Router <noreply@localhost>")
# Base of links in e-mails (https://router.example.com); unset = the inviting request's host.
EZAT_PUBLIC_URL = env.str("EZAT_PUBLIC_URL", default="")

# --- Auth, security -------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/dashboard/"
LOGOUT_REDIRECT_URL = "/login/"

SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=not DEBUG)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=not DEBUG)
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"] if (BASE_DIR / "static").is_dir() else []

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
}
SPECTACULAR_SETTINGS = {"TITLE": "EZAT Router management API", "VERSION": "1.0.0"}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "core.logging.JsonFormatter"}},
    "filters": {"no_4xx_traceback": {"()": "core.logging.ClientErrorsWithoutTraceback"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "json",
            "filters": ["no_4xx_traceback"],
        }
    },
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # The server's own lines (uvicorn configures these before Django loads): same JSON.
        "uvicorn": {"handlers": ["console"], "propagate": False},
        "uvicorn.error": {"handlers": [], "propagate": True},
        "uvicorn.access": {"handlers": ["console"], "propagate": False},
    },
}

# --- EZAT product knobs ---------------------------------------------------------------------------
EZAT_MAX_BODY_BYTES = env.int("EZAT_MAX_BODY_BYTES", default=32 * 1024 * 1024)
# Seconds of silence on a stream before a keep-alive (`event: ping` / `: ping`).
EZAT_PING_INTERVAL = env.float("EZAT_PING_INTERVAL", default=15.0)
# Seconds to wait for the first content event before opening a stream with keep-alives.
EZAT_STREAM_OPEN_AFTER = env.float("EZAT_STREAM_OPEN_AFTER", default=20.0)
# Per-attempt start deadline (time to the first content event) before trying the next deployment.
EZAT_ATTEMPT_START_DEADLINE = env.float("EZAT_ATTEMPT_START_DEADLINE", default=180.0)
EZAT_ATTEMPT_START_DEADLINE_HIGH_EFFORT = env.float(
    "EZAT_ATTEMPT_START_DEADLINE_HIGH_EFFORT", default=300.0
)
EZAT_UPSTREAM_CONNECT_TIMEOUT = env.float("EZAT_UPSTREAM_CONNECT_TIMEOUT", default=10.0)
# After a client disconnects mid-stream, keep reading the upstream this long for exact usage.
EZAT_DISCONNECT_DRAIN_SECONDS = env.float("EZAT_DISCONNECT_DRAIN_SECONDS", default=10.0)
# Graceful shutdown (ezat/serve.py): after SIGTERM, open requests and streams get this long to
# finish while /readyz answers 503 and new requests are refused; then the node closes and exits.
EZAT_SHUTDOWN_GRACE_SECONDS = env.float("EZAT_SHUTDOWN_GRACE_SECONDS", default=30.0)
if EZAT_SHUTDOWN_GRACE_SECONDS < 0:
    raise ImproperlyConfigured(
        f"EZAT_SHUTDOWN_GRACE_SECONDS must be 0 or more, not {EZAT_SHUTDOWN_GRACE_SECONDS!r}"
    )
# Process caches: how stale a key or the catalog may be (revocations and edits land within this).
EZAT_KEY_CACHE_TTL = env.float("EZAT_KEY_CACHE_TTL", default=3.0)
EZAT_CATALOG_POLL_INTERVAL = env.float("EZAT_CATALOG_POLL_INTERVAL", default=2.0)
# Routing health.
EZAT_COOLDOWN_FAILURES = env.int("EZAT_COOLDOWN_FAILURES", default=3)
EZAT_COOLDOWN_SECONDS = env.float("EZAT_COOLDOWN_SECONDS", default=30.0)
# A deployment whose provider account ran out of quota (OpenAI's 429 insufficient_quota) cools
# down at once for this long: OpenAI says a billing change can take up to 10 minutes to apply.
EZAT_QUOTA_COOLDOWN_SECONDS = env.float("EZAT_QUOTA_COOLDOWN_SECONDS", default=600.0)
# Vertex deployments: refresh an OAuth2 token this long before it expires (in the background),
# and retry a failed refresh after this long (the deployment cools down meanwhile).
EZAT_VERTEX_TOKEN_REFRESH_MARGIN = env.float("EZAT_VERTEX_TOKEN_REFRESH_MARGIN", default=300.0)
EZAT_VERTEX_TOKEN_RETRY_SECONDS = env.float("EZAT_VERTEX_TOKEN_RETRY_SECONDS", default=10.0)
# How a conversation picks its deployment (gateway/routing_policies.py). `rendezvous` is EZAT's
# routing; the others exist so the cache benchmark can measure naive routing through the same
# gateway (bench/cache.py).
EZAT_ROUTING_POLICIES = ("rendezvous", "modulo", "round_robin", "random", "least_busy")
EZAT_ROUTING_POLICY = env.str("EZAT_ROUTING_POLICY", default="rendezvous").strip().lower()
if EZAT_ROUTING_POLICY not in EZAT_ROUTING_POLICIES:
    raise ImproperlyConfigured(
        f"EZAT_ROUTING_POLICY must be one of {', '.join(EZAT_ROUTING_POLICIES)}, "
        f"not {EZAT_ROUTING_POLICY!r}"
    )
# Seed of the `random` policy's generator (reproducible benchmarks); unset = OS entropy.
EZAT_ROUTING_SEED = env.int("EZAT_ROUTING_SEED", default=None)
# Breakpoint-aware fallback: when a conversation's deployment is cooling, prefer the healthy one
# likeliest to hold its cached prefix over the next in rendezvous order (gateway/prefix_digest.py).
EZAT_ROUTING_PREFIX_AWARE = env.bool("EZAT_ROUTING_PREFIX_AWARE", default=True)
# Proxies whose X-Forwarded-For the gateway believes (CIDRs, comma-separated), for the keys' IP
# allow-lists; none by default: the caller is the TCP peer. List only your own load balancers.
EZAT_TRUSTED_PROXIES = env.list("EZAT_TRUSTED_PROXIES", default=[])
for _proxy in EZAT_TRUSTED_PROXIES:
    try:
        ipaddress.ip_network(_proxy, strict=False)
    except ValueError:
        raise ImproperlyConfigured(f"EZAT_TRUSTED_PROXIES: {_proxy!r} is not a CIDR") from None
# Limits and money.
EZAT_HOLD_TTL_SECONDS = env.int("EZAT_HOLD_TTL_SECONDS", default=900)
EZAT_FAILOPEN_RPM_FRACTION = env.float("EZAT_FAILOPEN_RPM_FRACTION", default=0.5)
# Money state in the limiter is re-read from the database this often (heals cross-process drift).
EZAT_MONEY_RESEED_SECONDS = env.float("EZAT_MONEY_RESEED_SECONDS", default=30.0)
EZAT_LIMITS_REDIS_PREFIX = EZAT_REDIS_PREFIX  # the former name (see EZAT_REDIS_PREFIX)
EZAT_DEFAULT_RPM = env.int("EZAT_DEFAULT_RPM", default=600)
# Requests in flight of keys / orgs without their own limit (0 = no limit).
EZAT_DEFAULT_KEY_CONCURRENCY = env.int("EZAT_DEFAULT_KEY_CONCURRENCY", default=0)
EZAT_DEFAULT_ORG_CONCURRENCY = env.int("EZAT_DEFAULT_ORG_CONCURRENCY", default=0)
# Slot and concurrency leases: a live request's process extends them every heartbeat; a crashed
# process's leases stop counting at most one lease after its last beat.
EZAT_SLOT_LEASE_SECONDS = env.float("EZAT_SLOT_LEASE_SECONDS", default=20.0)
EZAT_SLOT_HEARTBEAT_SECONDS = env.float("EZAT_SLOT_HEARTBEAT_SECONDS", default=5.0)
# Fair share (per deployment, Deployment.fair_share): an org refused a slot stays "active" (waiting)
# on that deployment this long; an org alone may not take the last HEADROOM of its capacity.
EZAT_FAIR_SHARE_ACTIVE_SECONDS = env.float("EZAT_FAIR_SHARE_ACTIVE_SECONDS", default=15.0)
EZAT_FAIR_SHARE_HEADROOM = env.float("EZAT_FAIR_SHARE_HEADROOM", default=0.1)
if EZAT_SLOT_HEARTBEAT_SECONDS * 2 > EZAT_SLOT_LEASE_SECONDS:
    raise ImproperlyConfigured(
        "EZAT_SLOT_HEARTBEAT_SECONDS must be at most half of EZAT_SLOT_LEASE_SECONDS"
    )
# Signed thinking blocks kept for OpenAI-format tool loops.
EZAT_THINKING_TTL_SECONDS = env.int("EZAT_THINKING_TTL_SECONDS", default=3600)
# Image URLs: loopback hosts are refused unless a test turns this on.
EZAT_IMAGE_ALLOW_LOOPBACK = env.bool("EZAT_IMAGE_ALLOW_LOOPBACK", default=False)
# Alerts (alerts/): webhook URLs follow the image rules (public addresses only); the loopback
# switch is for tests with a local receiver. Failed webhooks retry after base × 2^n seconds.
EZAT_WEBHOOK_ALLOW_LOOPBACK = env.bool("EZAT_WEBHOOK_ALLOW_LOOPBACK", default=False)
EZAT_ALERT_RETRY_BASE_SECONDS = env.float("EZAT_ALERT_RETRY_BASE_SECONDS", default=10.0)
EZAT_ALERT_WEBHOOK_MAX_RETRIES = env.int("EZAT_ALERT_WEBHOOK_MAX_RETRIES", default=8)
# Without Redis there is no beat: the gateway's embedded reconciliation loop (every
# EZAT_RECONCILE_INTERVAL) also runs these functions (beat's tasks call the same ones).
EZAT_EMBEDDED_PERIODIC = env.list(
    "EZAT_EMBEDDED_PERIODIC",
    default=["alerts.services.evaluate_all", "playground.services.revoke_expired_keys"],
)
# Playground (playground/): its per-session key is revoked this long after it was minted.
EZAT_PLAYGROUND_KEY_TTL_SECONDS = env.int("EZAT_PLAYGROUND_KEY_TTL_SECONDS", default=3600)
# Where the Playground's relay sends its requests (an internal address such as
# http://127.0.0.1:8000); empty = this server at the address its socket accepted the browser's
# connection on. Never derived from the request's Host header (playground/relay.py).
EZAT_PLAYGROUND_GATEWAY_URL = env.str("EZAT_PLAYGROUND_GATEWAY_URL", default="")
# Downloaded image bytes (base64) all requests of one process may hold at once, and how long a
# request waits for room before a 503 (gateway/images/memory.py).
EZAT_IMAGE_MEMORY_BUDGET = env.int("EZAT_IMAGE_MEMORY_BUDGET", default=256 * 1024 * 1024)
EZAT_IMAGE_MEMORY_WAIT = env.float("EZAT_IMAGE_MEMORY_WAIT", default=5.0)
# /readyz answers from a cached probe this many seconds old at most (one probe in flight).
EZAT_READYZ_CACHE_SECONDS = env.float("EZAT_READYZ_CACHE_SECONDS", default=1.0)
EZAT_READYZ_REQUIRE_DEPENDENCIES = env.bool("EZAT_READYZ_REQUIRE_DEPENDENCIES", default=False)
# Serve /static/ from the app itself (quickstart, single box); behind a CDN/proxy turn it off.
EZAT_SERVE_STATIC = env.bool("EZAT_SERVE_STATIC", default=DEBUG)
# Usage records on PostgreSQL: wait for the WAL flush before answering (the default). Off, a
# request's record is committed to PostgreSQL's memory and flushed within ~0.6 s: a PostgreSQL
# crash (not a gateway crash) in that window loses those records (requests go unbilled, never
# billed twice), for ~0.2–0.3 ms less latency per request.
EZAT_USAGE_SYNCHRONOUS_COMMIT = env.bool("EZAT_USAGE_SYNCHRONOUS_COMMIT", default=True)
# Durable usage (billing/spool.py, gateway/checkpoints.py). A usage record the database will not
# take goes to an fsynced append-only file per process in this directory (a persistent volume in a
# container deployment), replayed at start and every EZAT_USAGE_SPOOL_RETRY_SECONDS. After a
# failed write, records go straight to the spool for EZAT_USAGE_SPOOL_BYPASS_SECONDS.
EZAT_USAGE_SPOOL_DIR = env.str("EZAT_USAGE_SPOOL_DIR", default=str(BASE_DIR / "var" / "spool"))
EZAT_USAGE_SPOOL_RETRY_SECONDS = env.float("EZAT_USAGE_SPOOL_RETRY_SECONDS", default=5.0)
EZAT_USAGE_SPOOL_BYPASS_SECONDS = env.float("EZAT_USAGE_SPOOL_BYPASS_SECONDS", default=1.0)
# How a request's usage row is made durable before its answer ends (billing/usage_log.py):
# "direct" = an INSERT into the database (group-committed across concurrent requests, the
# spool during outages); "group" = an fsync of a local append-only log shared by concurrent
# requests, moved to the database in batches by a background flusher (no database round trip
# on the request path). docs/settings.md.
EZAT_USAGE_COMMIT = env.str("EZAT_USAGE_COMMIT", default="direct")
if EZAT_USAGE_COMMIT not in ("direct", "group"):
    raise ImproperlyConfigured(
        f"EZAT_USAGE_COMMIT must be 'direct' or 'group', not {EZAT_USAGE_COMMIT!r}"
    )
# group: a segment of the log is closed (and deleted once flushed) after this many records or
# this many seconds; a hold shrunk to an unflushed request's cost lives this long at most.
# group: how long the first record of a batch waits for others before the flusher stores them.
EZAT_USAGE_LOG_FLUSH_SECONDS = env.float("EZAT_USAGE_LOG_FLUSH_SECONDS", default=0.2)
# group: a batch the database has not taken within this many seconds is abandoned and retried
# on fresh connections (a hung connection must not stop the flusher for good).
EZAT_USAGE_LOG_STORE_TIMEOUT_SECONDS = env.float(
    "EZAT_USAGE_LOG_STORE_TIMEOUT_SECONDS", default=30.0
)
EZAT_USAGE_LOG_SEGMENT_RECORDS = env.int("EZAT_USAGE_LOG_SEGMENT_RECORDS", default=2000)
EZAT_USAGE_LOG_SEGMENT_SECONDS = env.float("EZAT_USAGE_LOG_SEGMENT_SECONDS", default=10.0)
EZAT_USAGE_UNFLUSHED_HOLD_SECONDS = env.float("EZAT_USAGE_UNFLUSHED_HOLD_SECONDS", default=86400)
# group: at most this many unflushed records wait in memory (a database outage); the rest are
# read back from the log's segments on disk when the database returns.
EZAT_USAGE_LOG_MEMORY_RECORDS = env.int("EZAT_USAGE_LOG_MEMORY_RECORDS", default=10000)
if EZAT_USAGE_LOG_MEMORY_RECORDS < 1:
    raise ImproperlyConfigured("EZAT_USAGE_LOG_MEMORY_RECORDS must be at least 1")
# Open streams' checkpoints (output so far, the hold): written at most every
# EZAT_CHECKPOINT_INTERVAL seconds, in Redis when REDIS_URL is set, else in files in
# EZAT_CHECKPOINT_DIR. A process silent for EZAT_CHECKPOINT_STALE_SECONDS counts as dead: its
# streams are billed as estimated usage by the sweeper.
EZAT_CHECKPOINT_INTERVAL = env.float("EZAT_CHECKPOINT_INTERVAL", default=1.0)
EZAT_CHECKPOINT_DIR = env.str("EZAT_CHECKPOINT_DIR", default=str(BASE_DIR / "var" / "checkpoints"))
EZAT_CHECKPOINT_STALE_SECONDS = env.float("EZAT_CHECKPOINT_STALE_SECONDS", default=10.0)
# A stream's first checkpoint is written this soon after its first token (new streams of that
# window share one write), not at the next interval: a process killed a moment after a stream's
# first token still leaves its bill behind.
EZAT_CHECKPOINT_FIRST_WRITE_DELAY = env.float("EZAT_CHECKPOINT_FIRST_WRITE_DELAY", default=0.05)
# Garbage collector of a serving process: objects alive at startup (Django, the apps, the catalog)
# are frozen out of collections, and the youngest generation is collected every N allocations
# instead of CPython's 700. 0 keeps CPython's defaults. See gateway/runtime.py.
EZAT_GC_GEN0_THRESHOLD = env.int("EZAT_GC_GEN0_THRESHOLD", default=20_000)
# Responses API: stored responses (`store: true`) are kept this many days, then purged by beat.
EZAT_RESPONSE_RETENTION_DAYS = env.int("EZAT_RESPONSE_RETENTION_DAYS", default=30)
# Days a request-log row is kept (usage records and the ledger are never deleted).
EZAT_REQUEST_LOG_RETENTION_DAYS = env.int("EZAT_REQUEST_LOG_RETENTION_DAYS", default=30)
# PostgreSQL: usage records and the request log are partitioned by month (billing/partitions.py);
# beat keeps this many months of partitions ready ahead of the current one. Rows outside every
# partition land in a default partition (an INSERT never fails); a late partition adopts them.
EZAT_PARTITION_MONTHS_AHEAD = env.int("EZAT_PARTITION_MONTHS_AHEAD", default=3)
# false: no request-log rows and no live-feed rows (metrics and log lines stay). On by default;
# off is for measuring what the log costs (bench/run.py --request-log-compare).
EZAT_REQUEST_LOG = env.bool("EZAT_REQUEST_LOG", default=True)
# Request-log rows the database refused (each one alone; the rest of its batch is stored) are
# appended here as JSON lines, for `manage.py replay_request_log_quarantine` once the cause is
# fixed (billing/request_log_quarantine.py). Counted in ezat_request_log_quarantined_total.
EZAT_REQUEST_LOG_QUARANTINE_DIR = env.str(
    "EZAT_REQUEST_LOG_QUARANTINE_DIR", default=str(BASE_DIR / "var" / "quarantine")
)
# A queued request-log row waits up to this long for others to share its INSERT (a full batch
# goes at once): at low concurrency a request costs no INSERT of its own. The dashboard's live
# feed does not wait for it. 1 s rather than 0.25 s: below a few hundred requests a second each
# flush carried a handful of rows, and the flushes were ~7 % of the gateway's CPU at C=1
# (issue 22's profile; the full stack cost ~11 % less with 1 s, as much as with the log off).
EZAT_REQUEST_LOG_FLUSH_SECONDS = env.float("EZAT_REQUEST_LOG_FLUSH_SECONDS", default=1.0)
# The dashboard's live request feed: rows are coalesced per org and published this often (one
# channel-layer message per org per flush, whatever the traffic).
EZAT_LIVE_FEED_FLUSH_SECONDS = env.float("EZAT_LIVE_FEED_FLUSH_SECONDS", default=1.0)
# Rows waiting for the writer beyond this are dropped and counted (the log is not the bill).
EZAT_REQUEST_LOG_MAX_PENDING = env.int("EZAT_REQUEST_LOG_MAX_PENDING", default=50_000)
# /metrics: served to these client addresses, or to any holder of EZAT_METRICS_TOKEN (bearer).
EZAT_METRICS_ALLOWED_IPS = env.list("EZAT_METRICS_ALLOWED_IPS", default=["127.0.0.1", "::1"])
EZAT_METRICS_TOKEN = env.str("EZAT_METRICS_TOKEN", default="")
# Per-org labels on request metrics: unbounded with many orgs, so off unless asked for.
EZAT_METRICS_ORG_LABELS = env.bool("EZAT_METRICS_ORG_LABELS", default=False)
# Seconds an answer waits for its stored copy to commit (so a continuation sent right after it,
# to any replica, finds it). Past this, or if the write fails, the answer goes out anyway.
EZAT_RESPONSE_STORE_WAIT = env.float("EZAT_RESPONSE_STORE_WAIT", default=2.0)
# Fernet key material for provider API keys at rest (defaults to one derived from SECRET_KEY).
EZAT_ENCRYPTION_KEY = env.str("EZAT_ENCRYPTION_KEY", default="")

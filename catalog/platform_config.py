"""What each deployment kind needs, checked before anything is saved.

Three kinds serve Claude: `anthropic` (Anthropic's Messages API), `bedrock` (Claude on Amazon
Bedrock, InvokeModel) and `vertex` (Claude on Google Vertex AI, rawPredict). Each has its own
credentials, its own model ids (catalog/data/platform_model_ids.json, overridable per deployment)
and its own default base URL. Wire facts: /work/shared/reference/platforms-and-responses.md §1–§3.

Two kinds serve any model behind OpenAI's Chat Completions API (docs/providers.md):
- `openai`: the base URL is what the OpenAI SDK calls `base_url` (it ends in `/v1`); requests go
  to `{base}/chat/completions` with `Authorization: Bearer KEY`, or no auth header without a key
  (vLLM, Ollama and llama.cpp run keyless) — https://platform.openai.com/docs/api-reference/authentication;
- `azure-openai`: the resource endpoint; requests go to `{endpoint}/openai/v1/chat/completions`
  with an `api-key` header (Azure OpenAI's v1 API,
  https://learn.microsoft.com/en-us/azure/ai-foundry/openai/api-version-lifecycle).
Both must list their models (`--model`): a Chat Completions server serves what it was started
with, not the whole catalog. A model's id on the server is its catalog id after the first `/`
unless `model_ids` says otherwise.

Kept apart from URL checks common to every kind (scheme, host) so those can change on their own.
The validators are pure apart from parsing a service-account key (google-auth, imported only
when one is given).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

ANTHROPIC = "anthropic"
BEDROCK = "bedrock"
VERTEX = "vertex"
OPENAI = "openai"
AZURE_OPENAI = "azure-openai"
CLAUDE_KINDS = (ANTHROPIC, BEDROCK, VERTEX)
OPENAI_KINDS = (OPENAI, AZURE_OPENAI)
KINDS = CLAUDE_KINDS + OPENAI_KINDS

# Provider switches kept in Deployment.options, with the values each may take.
# max_tokens_param: OpenAI deprecated `max_tokens` for `max_completion_tokens` (o-series models
# refuse `max_tokens`), while some servers only know `max_tokens`
# (https://platform.openai.com/docs/api-reference/chat/create#chat-create-max_tokens).
# prompt_cache_key: "derived" sends one made from the session when the client sent none
# (OpenAI routes its prompt cache by it: https://platform.openai.com/docs/guides/prompt-caching);
# "client" forwards only the client's own, for servers that refuse the field.
# responses_api: true when the server has OpenAI's Responses API (`POST {base}/responses`,
# https://platform.openai.com/docs/api-reference/responses/create): Responses requests are then
# relayed to it instead of translated to Chat Completions (gateway/handlers/responses_relay.py).
OPTIONS: dict[str, tuple[str | bool, ...]] = {
    "max_tokens_param": ("max_completion_tokens", "max_tokens"),
    "prompt_cache_key": ("derived", "client"),
    "responses_api": (True, False),
}
# The help text the admin shows beside Deployment.options.
OPTIONS_HELP = (
    'Provider options (JSON), OpenAI kinds only: "max_tokens_param" ("max_completion_tokens" '
    'or "max_tokens"), "prompt_cache_key" ("derived" or "client"), "responses_api" (true when '
    "the server has /responses: Responses requests are relayed to it, not translated)."
)

# Bedrock's and Vertex's own version strings, sent in the body instead of a header (reference
# §1.2 and §2: AWS and Anthropic docs, the official SDK).
BEDROCK_VERSION = "bedrock-2023-05-31"
VERTEX_VERSION = "vertex-2023-10-16"

_DATA = Path(__file__).resolve().parent / "data" / "platform_model_ids.json"

# AWS regions look like us-east-1, ap-southeast-2, us-gov-west-1, eu-central-2.
_AWS_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d{1,2}$")
# Google: global, the multi-regions us/eu, or a region such as us-east5, europe-west1.
_GCP_REGION = re.compile(r"^(global|us|eu|[a-z]+-[a-z]+\d{1,2})$")
# Project ids: 6–30 characters, lower-case letters, digits and hyphens, starting with a letter
# and not ending with a hyphen (https://cloud.google.com/resource-manager/docs/creating-managing-projects).
_GCP_PROJECT = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
# Access key ids are 16–128 word characters (IAM AccessKey.AccessKeyId), AKIA…/ASIA… in practice.
_AWS_KEY_ID = re.compile(r"^[A-Z0-9]{16,128}$")
_AWS_SECRET = re.compile(r"^[A-Za-z0-9/+=]{16,128}$")
_MODEL_ID = re.compile(r"^[A-Za-z0-9_.:/@\-]{1,2048}$")


class PlatformConfigError(ValueError):
    """A deployment's configuration cannot work; `field` names the offending field."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message


@dataclass(slots=True)
class PlatformConfig:
    """A deployment's platform settings as entered (secrets in plain text, never stored so)."""

    kind: str
    base_url: str = ""
    region: str = ""
    project: str = ""
    api_key: str = ""  # anthropic: x-api-key; bedrock: a Bedrock API key (Bearer)
    aws_access_key_id: str = ""
    aws_secret_access_key: str = ""
    aws_session_token: str = ""
    service_account_json: str = ""  # vertex: the key file's contents
    model_ids: dict[str, str] = field(default_factory=dict)
    options: dict[str, str | bool] = field(default_factory=dict)

    def secrets(self) -> dict[str, str]:
        """What is sealed at rest besides the API key: only the fields that are set."""
        values = {
            "aws_access_key_id": self.aws_access_key_id,
            "aws_secret_access_key": self.aws_secret_access_key,
            "aws_session_token": self.aws_session_token,
            "service_account_json": self.service_account_json,
        }
        return {k: v for k, v in values.items() if v}


@cache
def _shipped() -> dict[str, dict[str, str]]:
    data = json.loads(_DATA.read_text())
    return {kind: dict(data.get(kind, {})) for kind in (BEDROCK, VERTEX)}


def default_model_id(kind: str, model_id: str) -> str:
    """The platform's id for a catalog model: the shipped default for Bedrock and Vertex; for
    Anthropic (and models the file does not know), the catalog id without its `provider/`."""
    bare = model_id.split("/", 1)[-1]
    if kind == ANTHROPIC or kind in OPENAI_KINDS:
        return bare
    known = _shipped().get(kind, {}).get(model_id)
    if known is not None:
        return known
    return f"anthropic.{bare}" if kind == BEDROCK else bare


def default_base_url(kind: str, region: str) -> str:
    """The platform's public endpoint for a region (reference §1.1 and §2, the official SDK)."""
    if kind == BEDROCK:
        return f"https://bedrock-runtime.{region}.amazonaws.com"
    if kind == VERTEX:
        if region == "global":
            return "https://aiplatform.googleapis.com/v1"
        if region in ("us", "eu"):
            return f"https://aiplatform.{region}.rep.googleapis.com/v1"
        return f"https://{region}-aiplatform.googleapis.com/v1"
    return ""


# The API version in a Vertex base URL: the root the request paths start from is `…/v1`.
_VERTEX_VERSION_PATH = re.compile(r"/v1(?:beta1)?$")


def vertex_base_url(url: str) -> str:
    """A Vertex base URL with its API version: `https://host` and `https://host/v1` both mean
    `https://host/v1` (the request paths, `/projects/…`, start below the version). Any other
    path is a proxy's prefix and keeps it: `https://proxy/vertex` → `https://proxy/vertex/v1`."""
    url = url.strip().rstrip("/")
    if not url or _VERTEX_VERSION_PATH.search(url):
        return url
    return url + "/v1"


def base_url_for(kind: str, base_url: str, region: str) -> str:
    """The base URL requests go to: the deployment's own (Vertex: with its version), else the
    platform's regional default."""
    if not base_url:
        return default_base_url(kind, region)
    return vertex_base_url(base_url) if kind == VERTEX else base_url


def check(config: PlatformConfig, *, existing_secrets: bool = False) -> PlatformConfig:
    """Raise PlatformConfigError for the first thing that cannot work; the config, normalised.

    `existing_secrets`: an update of a saved deployment may leave its credentials as they are.
    """
    kind = config.kind
    if kind not in KINDS:
        raise PlatformConfigError("kind", f"must be one of {', '.join(KINDS)}, not {kind!r}")
    config.region = config.region.strip()
    config.project = config.project.strip()
    config.base_url = config.base_url.strip().rstrip("/")
    if kind == VERTEX:  # saved with its version, so what the admin shows is what is called
        config.base_url = vertex_base_url(config.base_url)
    _check_model_ids(config.model_ids)
    _check_options(config.options)
    if kind in OPENAI_KINDS:
        _check_openai(config, existing_secrets=existing_secrets)
    elif config.options:
        raise PlatformConfigError("options", f"a {kind} deployment takes no provider options")
    elif kind == ANTHROPIC:
        if not config.base_url:
            raise PlatformConfigError("url", "an anthropic deployment needs its base URL")
        if not config.api_key and not existing_secrets:
            raise PlatformConfigError("api_key", "an anthropic deployment needs an API key")
        _refuse(config, "aws_access_key_id", "aws_secret_access_key", "service_account_json")
    elif kind == BEDROCK:
        _check_bedrock(config)
    else:
        _check_vertex(config)
    return config


def _refuse(config: PlatformConfig, *names: str) -> None:
    for name in names:
        if getattr(config, name):
            raise PlatformConfigError(name, f"does not apply to a {config.kind} deployment")


def _check_model_ids(model_ids: Any) -> None:
    if not isinstance(model_ids, dict):
        raise PlatformConfigError("model_ids", "must map catalog model ids to platform model ids")
    for key, value in model_ids.items():
        if not isinstance(key, str) or not isinstance(value, str) or not _MODEL_ID.match(value):
            raise PlatformConfigError(
                "model_ids", f"{key!r} → {value!r} is not a platform model id"
            )


def _check_options(options: Any) -> None:
    if not isinstance(options, dict):
        raise PlatformConfigError("options", "must be a JSON object")
    for name, value in options.items():
        allowed = OPTIONS.get(name)
        if allowed is None:
            raise PlatformConfigError(
                "options", f"unknown option {name!r} (known: {', '.join(OPTIONS)})"
            )
        # By type as well: 1 == True in Python, and "true" is not true.
        if not any(type(value) is type(a) and value == a for a in allowed):
            shown = ", ".join(json.dumps(a) for a in allowed)
            raise PlatformConfigError(f"options.{name}", f"must be one of {shown}, not {value!r}")


def _check_openai(config: PlatformConfig, *, existing_secrets: bool) -> None:
    if not config.base_url:
        raise PlatformConfigError(
            "url",
            "an openai deployment needs its base URL (the OpenAI SDK's base_url, e.g. "
            "https://api.openai.com/v1 or http://localhost:8000/v1)"
            if config.kind == OPENAI
            else "an azure-openai deployment needs its endpoint (https://NAME.openai.azure.com)",
        )
    if config.kind == AZURE_OPENAI:
        if not config.api_key and not existing_secrets:
            raise PlatformConfigError("api_key", "an azure-openai deployment needs its API key")
        # The v1 API lives under {endpoint}/openai/v1; an endpoint given with it is kept so.
        if not config.base_url.endswith("/openai/v1"):
            config.base_url = config.base_url.removesuffix("/openai") + "/openai/v1"
    _refuse(
        config,
        "region",
        "project",
        "aws_access_key_id",
        "aws_secret_access_key",
        "service_account_json",
    )


def _check_bedrock(config: PlatformConfig) -> None:
    if not config.region:
        raise PlatformConfigError("region", "a bedrock deployment needs its AWS region")
    if not _AWS_REGION.match(config.region):
        raise PlatformConfigError("region", f"{config.region!r} is not an AWS region (us-east-1)")
    _refuse(config, "project", "service_account_json")
    key_id, secret = config.aws_access_key_id.strip(), config.aws_secret_access_key.strip()
    if config.api_key and (key_id or secret or config.aws_session_token):
        raise PlatformConfigError(
            "bedrock_api_key", "give a Bedrock API key or AWS access keys, not both"
        )
    if bool(key_id) != bool(secret):
        missing = "aws_secret_access_key" if key_id else "aws_access_key_id"
        raise PlatformConfigError(missing, "AWS access keys come as an id and a secret")
    if config.aws_session_token and not key_id:
        raise PlatformConfigError("aws_session_token", "needs an access key id and secret")
    if key_id and not _AWS_KEY_ID.match(key_id):
        raise PlatformConfigError("aws_access_key_id", "malformed (expected e.g. AKIA… )")
    if secret and not _AWS_SECRET.match(secret):
        raise PlatformConfigError("aws_secret_access_key", "malformed")
    if config.api_key and (len(config.api_key) < 16 or any(c.isspace() for c in config.api_key)):
        raise PlatformConfigError("bedrock_api_key", "malformed")
    config.aws_access_key_id, config.aws_secret_access_key = key_id, secret
    # No keys at all: botocore's standard chain (environment, profile, role, web identity).


def _check_vertex(config: PlatformConfig) -> None:
    if not config.project:
        raise PlatformConfigError("project", "a vertex deployment needs its Google Cloud project")
    if not _GCP_PROJECT.match(config.project):
        raise PlatformConfigError("project", f"{config.project!r} is not a project id")
    if not config.region:
        raise PlatformConfigError("region", "a vertex deployment needs its region (or global)")
    if not _GCP_REGION.match(config.region):
        raise PlatformConfigError("region", f"{config.region!r} is not a Vertex AI region")
    _refuse(config, "api_key", "aws_access_key_id", "aws_secret_access_key")
    if config.service_account_json:
        check_service_account(config.service_account_json)
    # None given: Application Default Credentials, resolved when the deployment is first used.


def check_service_account(text: str) -> dict[str, Any]:
    """A service-account key file's contents, parsed and its private key loaded."""
    try:
        info = json.loads(text)
    except ValueError:
        raise PlatformConfigError("service_account_file", "is not JSON") from None
    if not isinstance(info, dict) or info.get("type") != "service_account":
        raise PlatformConfigError(
            "service_account_file", 'is not a service-account key ("type": "service_account")'
        )
    for name in ("client_email", "private_key", "token_uri"):
        if not isinstance(info.get(name), str) or not info[name]:
            raise PlatformConfigError("service_account_file", f"has no {name}")
    from google.oauth2 import service_account  # only where a Vertex deployment is configured

    try:
        service_account.Credentials.from_service_account_info(info)
    except (ValueError, TypeError) as exc:
        raise PlatformConfigError(
            "service_account_file", f"its private key cannot be loaded ({exc})"
        ) from None
    return info


def read_service_account_file(path: str) -> str:
    """The file's contents; a clear error when it cannot be read."""
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise PlatformConfigError(
            "service_account_file", f"cannot read {path!r} ({type(exc).__name__}: {exc})"
        ) from None

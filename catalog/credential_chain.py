"""Whether a deployment that relies on its platform's ambient credentials would find any.

A Bedrock deployment without keys signs with botocore's standard chain (environment, profile,
role, web identity, instance metadata); a Vertex one without a service-account key uses Google's
Application Default Credentials. Both are resolved only when a request is first routed there,
so a machine with neither accepted the deployment silently and every request then failed with
502 (issue 33, item 4). `add_deployment` asks here and warns; nothing is refused, because the
credentials may exist only where the gateway runs (a role on its host, not on the operator's).
"""

from __future__ import annotations

from catalog.models import Deployment


def missing_credentials(deployment: Deployment) -> str | None:
    """Why this deployment would have no credentials from this machine, or None."""
    secrets = deployment.get_secrets()
    if deployment.kind == Deployment.Kind.BEDROCK:
        if deployment.api_key_encrypted or secrets.get("aws_access_key_id"):
            return None
        return _aws_chain_missing()
    if deployment.kind == Deployment.Kind.VERTEX:
        if secrets.get("service_account_json"):
            return None
        return _google_adc_missing()
    return None


def _aws_chain_missing() -> str | None:
    import botocore.session
    from botocore.exceptions import BotoCoreError

    try:
        found = botocore.session.get_session().get_credentials()
    except BotoCoreError as exc:  # a named profile that does not exist, a failing process
        return f"the AWS credential chain fails here ({exc})"
    if found is None:
        return "no AWS credentials found in the standard chain"
    return None


def _google_adc_missing() -> str | None:
    import google.auth
    from google.auth.exceptions import GoogleAuthError

    try:
        google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
    except GoogleAuthError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else "none found"
        return f"no Google Application Default Credentials ({first})"
    return None

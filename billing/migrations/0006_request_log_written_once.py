"""Issue 16: a request-log row is written once (unique request id and start), so the writer's
batch INSERT can be ON CONFLICT DO NOTHING and a retried batch doubles nothing."""

from __future__ import annotations

from typing import Any

from django.db import migrations, models


def drop_duplicates(apps: Any, schema_editor: Any) -> None:
    """Rows written twice before the constraint existed (a retried batch): keep the first."""
    from django.db.models import Count, Min

    RequestLog = apps.get_model("billing", "RequestLog")
    doubled = (
        RequestLog.objects.values("request_id", "started_at")
        .annotate(n=Count("id"), keep=Min("id"))
        .filter(n__gt=1)
    )
    for group in doubled.iterator():
        RequestLog.objects.filter(
            request_id=group["request_id"], started_at=group["started_at"]
        ).exclude(id=group["keep"]).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("billing", "0005_usage_status_stream_failed"),
    ]

    operations = [
        migrations.RunPython(drop_duplicates, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="requestlog",
            name="request_id",
            field=models.CharField(max_length=160),
        ),
        migrations.AddIndex(
            model_name="requestlog",
            index=models.Index(
                fields=["request_id"],
                name="reqlog_request_prefix",
                opclasses=["varchar_pattern_ops"],
            ),
        ),
        migrations.AddConstraint(
            model_name="requestlog",
            constraint=models.UniqueConstraint(
                fields=["request_id", "started_at"], name="reqlog_request_once"
            ),
        ),
    ]

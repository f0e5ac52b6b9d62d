"""A job name holding U+202E (right-to-left override) in an alert: in plain text it reversed the rest of
its line — "Owner: …" and the link after a name read backwards in Slack, Telegram and a webhook's text.
Each user value (a ``literal`` fact) is set apart with FSI … PDI and closes what it opens."""

from __future__ import annotations

from app.alerts.messages import Fact, Message, describe
from app.alerts.rendering import plain_text, slack_body, telegram_body, webhook_body
from app.formatting import balanced

RLO, FSI, PDI = "\u202e", "\u2068", "\u2069"
NAME = RLO + "Send a web request (webhook)"

MESSAGE = Message(
    kind="job_failed",
    icon="❌",
    headline="Job failed: Send a web request",
    facts=(Fact("Label", NAME, "literal"), Fact("Owner", "ann@example.com", "literal")),
    url="https://jobdesk.example/jobs/1",
)


def test_a_name_with_a_direction_override_is_set_apart_in_every_channels_text() -> None:
    texts = {
        "webhook": plain_text(MESSAGE),
        "slack": slack_body(MESSAGE)["text"],
        "telegram": telegram_body(MESSAGE, "42")["text"],
    }
    for channel, text in texts.items():
        line = next(line for line in text.splitlines() if "Label" in line)
        assert f"{FSI}{NAME}\u202c{PDI}" in line, f"{channel}: {line!r}"
        for line in text.splitlines():  # nothing reaches past its value into the words after it
            assert balanced(line) == line, f"{channel}: {line!r}"
        # plain left-to-right text is kept exactly as it was typed
        assert f"{FSI}ann@example.com" not in text and "ann@example.com" in text


def test_a_job_type_title_or_name_in_a_headline_is_set_apart_in_every_channels_text() -> None:
    """The headline names a job type by its title, or by its name when this process does not know the
    type; an admin's headline names a job type acted on. Each is a value beside our words."""
    name = RLO + "report.csv"
    base = "https://jobdesk.example"
    messages = {
        "failed": describe(
            "failed", {"job_id": "1", "type": name}, created_at=None, owner_email=None, base_url=base
        ),
        "approval": describe(
            "approval_needed", {"job_id": "1", "type": name}, created_at=None, owner_email=None, base_url=base
        ),
        "pipeline": describe(
            "pipeline_failed",
            {"pipeline_id": "2", "step": {"key": "a", "type": name}},
            created_at=None,
            owner_email=None,
            base_url=base,
        ),
        "admin": describe(
            "admin_action",
            {"target_type": "job_type", "targets": [name], "action": "job_type.limits"},
            created_at=None,
            owner_email=None,
            base_url=base,
        ),
    }
    shown = f"{FSI}{name}\u202c{PDI}"
    for what, message in messages.items():
        texts = {
            "webhook": plain_text(message),
            "slack": slack_body(message)["text"],
            "telegram": telegram_body(message, "42")["text"],
        }
        for channel, text in texts.items():
            head = text.splitlines()[0]
            assert shown in head, f"{what} {channel}: {head!r}"
            assert balanced(head) == head, f"{what} {channel}: {head!r}"
        assert shown in webhook_body(message, alert_id=1, payload={}, created_at=None)["headline"]
    # a title of left-to-right words is kept as it is
    plain = describe("failed", {"type": "report.csv"}, created_at=None, owner_email=None, base_url=base)
    assert plain.headline == "Job failed: report.csv"

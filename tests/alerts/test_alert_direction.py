"""A job name holding U+202E (right-to-left override) in an alert: in plain text it reversed the rest of
its line — "Owner: …" and the link after a name read backwards in Slack, Telegram and a webhook's text.
Each user value (a ``literal`` fact) is set apart with FSI … PDI and closes what it opens."""

from __future__ import annotations

from app.alerts.messages import Fact, Message
from app.alerts.rendering import plain_text, slack_body, telegram_body
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

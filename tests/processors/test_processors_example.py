"""The README's "Your own processor" example (``examples/my_processor.py``): loaded through
``JOBDESK_PROCESSOR_MODULES``, its type and template run end to end through the API; and no input makes
a built-in type's validation fail with anything but a readable 422."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from app.errors import BadInput, TooLarge
from app.processors import registry
from tests.support.procs import EXAMPLES, ROOT, as_dict
from tests.support.webkit import add_token, add_user, app_client
from tests.support.workers import running_worker, wait_until

BUILT_IN = [
    "http.request",
    "email.send",
    "images.thumbnail",
    "images.contact_sheet",
    "images.batch",
    "report.csv_check",
    "report.csv_summary",
    "report.csv_report",
]
PAGE = b"""<!doctype html><html><head><title>Penguins</title><style>p { color: red }</style></head>
<body><p>Penguins swim. Penguins dive, and penguins walk on the ice.</p>
<script>var ignored = "script words";</script><p>The ice is cold; the sea is colder.</p></body></html>"""


def test_the_example_module_loads_through_the_setting() -> None:
    env = {
        **os.environ,
        "JOBDESK_PROCESSOR_MODULES": "my_processor",
        "PYTHONPATH": os.pathsep.join([str(EXAMPLES), str(ROOT)]),
    }
    code = (
        "from app.processors import registry; from app.pipelines import get_template; "
        "s = registry.get('example.word_count'); t = get_template('example.page_words'); "
        "print(s.title, s.group, s.timeout, s.max_attempts, '|', t.title, [x.key for x in t.steps])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    assert (
        out.stdout.strip() == "Count words Examples 60 2 | Most common words of a web page ['fetch', 'count']"
    )


@pytest.fixture(scope="module")
def page_server() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(PAGE)))
            self.end_headers()
            self.wfile.write(PAGE)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/page"
    httpd.shutdown()
    httpd.server_close()


async def test_the_example_template_runs_end_to_end_through_the_api(
    page_server, make_settings, db_url, pg
) -> None:
    sys.path.insert(0, str(EXAMPLES))
    try:
        import my_processor  # noqa: F401  (registers example.word_count and example.page_words)
    finally:
        sys.path.remove(str(EXAMPLES))
    # the page server is a local service: an admin allows it, as http.request refuses loopback addresses
    settings = make_settings(worker_enabled=False, http_request_allowed_hosts="127.0.0.1")
    user = await add_user(db_url, "engineer@example.com")
    headers = {"Authorization": f"Bearer {await add_token(db_url, user.id)}"}
    async with app_client(settings) as client:
        bad = await client.post(
            "/api/pipelines",
            json={"template": "example.page_words", "input_data": {"url": page_server, "top": 0}},
            headers=headers,
        )
        assert bad.status_code == 422
        assert "input_data.top" in bad.json()["errors"]
        resp = await client.post(
            "/api/pipelines",
            json={"template": "example.page_words", "input_data": {"url": page_server, "top": 3}},
            headers=headers,
        )
        assert resp.status_code == 201, resp.text
        pid = resp.json()["id"]
        async with running_worker(settings):
            await wait_until(
                lambda: pg.fetchval("SELECT status = 'completed' FROM pipelines WHERE id = $1::uuid", pid),
                what="the example pipeline",
            )
    result = as_dict(
        await pg.fetchval(
            "SELECT result_data FROM jobs WHERE pipeline_id = $1::uuid AND step_key = 'count'", pid
        )
    )
    assert result["top"] == [
        {"word": "penguins", "count": 4},
        {"word": "ice", "count": 2},
        {"word": "swim", "count": 1},
    ]
    assert result["words"] == 19  # the title and the text; not the style or the script


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=10), children, max_size=3)
    ),
    max_leaves=8,
)
FIELDS = [
    "url",
    "method",
    "headers",
    "body_type",
    "body",
    "timeout",
    "to",
    "cc",
    "reply_to",
    "subject",
    "image",
    "images",
    "sizes",
    "format",
    "quality",
    "name",
    "columns",
    "cell",
    "title",
    "file",
    "encoding",
    "delimiter",
    "header",
    "top",
    "build_report",
    "from_step",
]


@hsettings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    type_=st.sampled_from(BUILT_IN),
    data=st.dictionaries(
        st.sampled_from(FIELDS),
        json_values
        | st.sampled_from(
            [
                "https://x.test",
                "ftp://x",
                "POST",
                "json",
                "text",
                "a@b.test",
                "WEBP",
                "0191e0c1-0000-7000-8000-000000000009",
            ]
        ),
        max_size=6,
    ),
)
def test_no_input_breaks_validation(type_: str, data: dict[str, Any]) -> None:
    try:
        registry.get(type_).validate_input(data)
    except (BadInput, TooLarge) as exc:
        assert exc.errors if isinstance(exc, BadInput) else True

"""``POST /api/files`` with a file part that has no file name says that the file needs a name, not to
send the file as multipart in a part named 'file' (which the client did); without a ``file`` part the
answer stays that one."""

from __future__ import annotations

from tests.support.webkit import AdminApi


async def test_a_file_without_a_name_is_told_it_needs_one(admin_api: AdminApi) -> None:
    for files in ({"file": ("", b"hello")}, {"file": (None, b"hello")}):
        r = await admin_api.client.post("/api/files", files=files, headers=admin_api.root)
        assert r.status_code == 422, r.text
        said = r.json()["errors"]["file"]
        assert said.startswith("the part named 'file' has no file name"), said
        assert "curl -F file=@report.pdf" in said
    r = await admin_api.client.post("/api/files", files={"other": ("a.txt", b"x")}, headers=admin_api.root)
    assert r.json()["errors"]["file"] == "send the file as multipart/form-data in a part named 'file'", r.text
    assert await admin_api.pg.fetchval("SELECT count(*) FROM files") == 0

"""TensorBoard's fonts under the hub: its own index.html, as TensorBoard sends it (gzipped or not), through the
rewrite that jupyter-server-proxy applies to its responses."""

from __future__ import annotations

import gzip
import io
import re
import zipfile
from pathlib import Path

import pytest
import tensorboard
from jupyter_server_proxy.handlers import RewritableResponse
from tornado import httpclient, httputil

from portal.notebook import tensorboard_fonts_under_prefix, tensorboard_proxy

PREFIX = "/user/alice/tensorboard"
INDEX = zipfile.ZipFile(Path(tensorboard.__file__).parent / "webfiles.zip").read("index.html")


def served(body: bytes, path: str, content_type: str = "text/html; charset=utf-8", gzipped: bool = False):
    headers = httputil.HTTPHeaders({"Content-Type": content_type, "Content-Length": str(len(body))})
    if gzipped:
        headers["Content-Encoding"] = "gzip"
    request = httpclient.HTTPRequest(f"http://127.0.0.1:6006{path}")
    request.path = path
    response = RewritableResponse(orig_response=httpclient.HTTPResponse(request, 200, headers=headers,
                                                                          buffer=io.BytesIO(body)))
    tensorboard_fonts_under_prefix(response=response, request=request)
    return response


@pytest.mark.parametrize("gzipped", [False, True])
@pytest.mark.parametrize("path", [f"{PREFIX}/", f"{PREFIX}/index.html"])
def test_every_font_of_tensorboards_page_is_asked_under_its_own_path(path, gzipped):
    assert INDEX.count(b"url(/font-roboto/") > 10  # TensorBoard 2.15's page, as installed
    response = served(gzip.compress(INDEX) if gzipped else INDEX, path, gzipped=gzipped)
    body = gzip.decompress(response.body) if gzipped else response.body
    assert b"url(/font-roboto/" not in body
    fonts = re.findall(rb"url\(([^)]*font-roboto/[^)]*)\)", body)
    assert fonts and all(font.startswith(f"{PREFIX}/font-roboto/".encode()) for font in fonts)
    assert response.headers["Content-Length"] == str(len(response.body))


def test_nothing_else_is_touched():
    script = b"var css = 'url(/font-roboto/x.woff2)';"
    assert served(script, f"{PREFIX}/index.js", "application/javascript").body == script
    broken = b"\x1f\x8b not gzip"
    assert served(broken, f"{PREFIX}/", gzipped=True).body == broken


def test_the_proxy_entry_uses_it():
    assert tensorboard_proxy()["rewrite_response"] is tensorboard_fonts_under_prefix

"""The dashboard's security headers as built (portal.service.headers), the nonce on the templates' inline
elements (portal.service.render), and the proxy's HSTS value. test_base.py checks them on real responses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from jupyterhub._data import DATA_FILES_PATH

from portal.service import HUB_TEMPLATES
from portal.service.headers import HSTS, PROXY_HSTS, content_security_policy, new_nonce, strict_transport_security
from portal.service.render import TEMPLATES, environment, hub_namespace, hub_static, nonced


def directives(policy: str) -> dict[str, list[str]]:
    parts = [part.split() for part in policy.split(";") if part.strip()]
    return {words[0]: words[1:] for words in parts}


def test_a_pages_policy_loads_only_the_sites_own_and_runs_only_its_nonced_inline_code():
    policy = directives(content_security_policy("/", "abc-_123"))
    assert policy["default-src"] == ["'self'"]
    assert policy["script-src"] == ["'self'", "'nonce-abc-_123'"]
    assert policy["style-src"] == ["'self'", "'nonce-abc-_123'"]
    assert policy["img-src"] == ["'self'", "data:"]  # Bootstrap's icons are data: SVGs in its CSS
    assert policy["object-src"] == ["'none'"] and policy["form-action"] == ["'self'"]
    assert policy["frame-ancestors"] == ["'none'"]  # as the hub's own pages, as before
    assert policy["report-uri"] == ["/hub/security/csp-report"]
    assert not any("unsafe" in source for sources in policy.values() for source in sources)
    # frame-src and connect-src fall back to default-src 'self': TensorBoard's frame and the API are the site's.
    assert "frame-src" not in policy and "connect-src" not in policy


def test_an_answer_that_is_no_page_loads_nothing_and_the_report_goes_to_the_hub_under_its_base_url():
    policy = directives(content_security_policy("/base/", None))
    assert policy["default-src"] == ["'none'"] and policy["frame-ancestors"] == ["'none'"]
    assert policy["report-uri"] == ["/base/hub/security/csp-report"] and "script-src" not in policy


@pytest.mark.parametrize("nonce", ["", "a b", "x'; script-src *", "é"])
def test_a_nonce_that_could_change_the_policy_is_refused(nonce):
    with pytest.raises(ValueError, match="nonce is .*; allowed: base64 characters"):
        content_security_policy("/", nonce)


def test_each_nonce_is_fresh_and_long_enough():
    nonces = {new_nonce() for _ in range(1000)}
    assert len(nonces) == 1000
    assert all(len(n) >= 22 and re.fullmatch(r"[A-Za-z0-9_-]+", n) for n in nonces)  # 128 bits, base64url


def test_hsts_only_over_https():
    assert strict_transport_security("https") == HSTS == "max-age=31536000"
    assert strict_transport_security("http") is None and strict_transport_security("") is None


def test_the_proxy_sends_the_same_hsts_value():
    assert PROXY_HSTS.is_file(), PROXY_HSTS
    assert re.search(r'const HSTS = "([^"]+)"', PROXY_HSTS.read_text()).group(1) == HSTS


def test_inline_script_and_style_get_the_nonce_in_the_source_and_loaded_files_do_not():
    source = '<script type="text/javascript">a()</script><script src="x.js"></script><style>\n</style><SCRIPT>'
    assert nonced(source) == ('<script type="text/javascript" nonce="{{ csp_nonce }}">a()</script>'
                              '<script src="x.js"></script><style nonce="{{ csp_nonce }}">\n</style>'
                              '<SCRIPT nonce="{{ csp_nonce }}">')
    assert nonced(nonced(source)) == nonced(source)  # a tag with a nonce is left as it is


def test_the_hubs_page_renders_its_inline_script_and_style_with_this_responses_nonce_and_nothing_else_does():
    """The hub's page.html (require.config, window.jhdata: in no block) under the dashboard's policy; a value
    the page writes out that looks like a script tag never gets the nonce."""
    env = environment()
    namespace = hub_namespace("/", hub_static("/"), None, "tok", "")
    page = env.get_template("page.html").render(
        namespace, csp_nonce="N0nce", portal_url="/services/portal/",
        announcement='<script>alert(1)</script>')  # the hub's page writes it out unescaped (| safe)
    inline = re.findall(r"<(?:script|style)\b(?![^>]*\bsrc=)[^>]*>", page, re.IGNORECASE)
    assert len(inline) >= 2, inline  # the hub's script, our focus-ring style
    assert [tag for tag in inline if 'nonce="N0nce"' not in tag] == ["<script>"]  # the written-out value only


TEMPLATE_FILES = sorted([*TEMPLATES.glob("*.html"), *HUB_TEMPLATES.glob("*.html"),
                         Path(DATA_FILES_PATH, "templates", "page.html")])


@pytest.mark.parametrize("template", TEMPLATE_FILES, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_no_template_has_what_a_nonce_cannot_allow(template):
    """Inline handlers (onclick=), style attributes and javascript: URLs run under no nonce: the pages' policy
    blocks them, so a page that had them would break. Styles go in portal.css, behaviour in portal.js."""
    source = template.read_text()
    assert not re.findall(r"<[^>]*\s(on[a-z]+|style)\s*=", source, re.IGNORECASE), template
    assert "javascript:" not in source.lower(), template


def test_the_hub_starts_its_proxy_with_hsts_and_its_spawn_throttle_says_the_wait_it_sends():
    """jupyterhub_config.py: the proxy loads proxy_hsts.js; the hub's own 429 (too many spawns pending) says
    "Try again in N seconds" with N its Retry-After rounded up to tens, so one value, a multiple of ten up to 90
    (past that the text says minutes), makes the two agree (jupyterhub.handlers.base)."""
    import runpy

    from traitlets.config import Config

    config = Config()
    runpy.run_path(str(Path(__file__).resolve().parents[4] / "jupyterhub_config.py"),
                   init_globals={"get_config": lambda: config})
    assert config.ConfigurableHTTPProxy.command[:3] == ["node", "--require", str(PROXY_HSTS)]
    assert config.ConfigurableHTTPProxy.command[3].endswith("/.bin/configurable-http-proxy")
    low, high = config.JupyterHub.spawn_throttle_retry_range
    assert low == high and low % 10 == 0 and 0 < low <= 90, (low, high)

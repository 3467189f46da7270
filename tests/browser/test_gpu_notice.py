"""The lab's idle-GPU notice (deploy/jupyterlab/gpu-notice, docs/gpus.md) alone in headless Chromium: loaded as
JupyterLab loads a prebuilt extension (its container initialised with a share scope that holds a recording
Notification, then asked for "./extension"), against its own server's answers given here (Playwright's routes, no
box: portal.lab_gpus's, tested in tests/unit/portal/test_lab_gpus.py). It asks only its own server, with the
server's XSRF token, shows each warning once with "Keep it", posts the keep to its server, and takes a notice away
once its warning is gone; where the lab has a status bar (its token in the share scope), it shows what the server's
GPUs do now, node by node, and hides the line when they are gone. That the real JupyterLab loads it and shows the
line: tests/browser/test_login_to_lab.py."""

from __future__ import annotations

import json
from pathlib import Path

from playwright import sync_api as playwright

from tests.browser.conftest import new_context

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "jupyterlab" / "gpu-notice" / "static" / "remoteEntry.js"
ORIGIN = "https://hub.test"
PORTAL = "/services/portal/"
LAB = """<!DOCTYPE html><html lang="en"><head><title>JupyterLab</title>
<script id="jupyter-config-data" type="application/json">{"hubPrefix": "/hub/", "baseUrl": "/user/alice/"}</script>
<script>
window.__notes = [];
const Notification = {
  emit(message, type, options) {
    window.__notes.push({message, type, options, open: true});
    return String(window.__notes.length - 1);
  },
  update(args) { Object.assign(window.__notes[Number(args.id)], {message: args.message, type: args.type}); },
  dismiss(id) { window.__notes[Number(id)].open = false; },
};
window.__share = {"@jupyterlab/apputils": {"4.6.6": {get: () => Promise.resolve(() => ({Notification}))}}};
STATUS_BAR
</script>
<script src="/user/alice/lab/extensions/dsportal-gpu-notice/static/remoteEntry.js"></script></head>
<body><script>
const container = window._JUPYTERLAB["dsportal-gpu-notice"];
container.init(window.__share).then(() => container.get("./extension")).then(factory => {
  const plugin = factory().default;  // as JupyterLab does: each optional token it has, in order
  plugin.activate({}, ...plugin.optional.map(token => token === window.__statusBarToken ? window.__statusBar : null));
});
</script></body></html>"""
# A status bar as JupyterLab's share scope gives one: its token, a bar that places registered items, lumino's Widget.
STATUS_BAR = """window.__statusBarToken = {name: "@jupyterlab/statusbar:IStatusBar"};
class Widget {
  constructor() { this.node = document.createElement("div"); this.isHidden = false; }
  addClass(name) { this.node.classList.add(name); }
  setHidden(hidden) { this.isHidden = hidden; this.node.hidden = hidden; }
}
window.__statusBar = {items: {}, registerStatusItem(id, status) {
  this.items[id] = status; document.getElementById("status-bar").appendChild(status.item.node);
}};
window.__share["@jupyterlab/statusbar"] = {"4.6.6": {get: () => Promise.resolve(
  () => ({IStatusBar: window.__statusBarToken}))}};
window.__share["@lumino/widgets"] = {"2.7.2": {get: () => Promise.resolve(() => ({Widget}))}};"""
STATUS_BAR_DIV = '<div id="status-bar" style="font: 13px sans-serif; padding: 4px; background: #eee"></div>'
SERVER_GPUS = [{"node": "slurm-node1", "index": 0, "busy": 37.4, "memory_used_mib": 1200, "memory_total_mib": 16384,
                "source": "standin", "error": ""},
               {"node": "slurm-node2", "index": 1, "busy": None, "memory_used_mib": None, "memory_total_mib": None,
                "source": "standin", "error": "no reading for 75 s: the node's reader stopped"}]
WARNING = {"holder": "12", "server": True, "idle_since": 40.0, "warned_at": 1840.0, "deadline": 5440.0,
           "left_s": 1790.0}
XSRF = "2|ab|10:1795|5:_xsrf"  # the server's _xsrf cookie, as Jupyter's server sets it with the lab's page


class Server:
    """The lab's own server: its page (with its _xsrf cookie) and portal.lab_gpus's two answers."""

    def __init__(self) -> None:
        self.warnings = [WARNING]
        self.server_gpus: list[dict] = []
        self.status_bar = False
        self.asked: list[str] = []
        self.posts: list[dict] = []

    def answer(self, route) -> None:
        request, path = route.request, route.request.url[len(ORIGIN):]
        self.asked.append(f"{request.method} {path}")
        if path.endswith("remoteEntry.js"):
            route.fulfill(body=SCRIPT.read_text(), content_type="text/javascript")
        elif path == "/user/alice/lab":
            lab = LAB.replace("STATUS_BAR", STATUS_BAR if self.status_bar else "")
            route.fulfill(body=lab.replace("<body>", "<body>" + STATUS_BAR_DIV), content_type="text/html",
                          headers={"Set-Cookie": f"_xsrf={XSRF}; Path=/user/alice/"})
        elif request.headers.get("x-xsrftoken") != XSRF:  # as Jupyter's server refuses a request without it
            route.fulfill(status=403, body='{"message": "XSRF"}', content_type="application/json")
        elif path == "/user/alice/dsportal/gpus" and request.method == "GET":
            route.fulfill(body=json.dumps({"watched": True, "warnings": self.warnings, "history": [],
                                           "server_gpus": self.server_gpus}), content_type="application/json")
        elif path == "/user/alice/dsportal/gpus/keep" and request.method == "POST":
            self.posts.append(json.loads(request.post_data))
            self.warnings = []
            route.fulfill(body='{"act": "keep"}', content_type="application/json")
        else:
            route.fulfill(status=404, body="")


def test_the_lab_shows_each_warning_once_keeps_it_and_takes_the_notice_away(browser):
    context = new_context(browser)
    page = context.new_page()
    server = Server()
    try:
        page.clock.install()
        page.route(f"{ORIGIN}/**", server.answer)
        page.goto(f"{ORIGIN}/user/alice/lab")
        page.wait_for_function("() => window.__notes.length === 1")
        assert page.get_attribute("body", "data-dsportal-gpu-notice") == "on"
        note = page.evaluate("() => ({message: window.__notes[0].message, type: window.__notes[0].type, "
                             "actions: window.__notes[0].options.actions.map(a => a.label)})")
        assert note == {"message": "Your JupyterLab server's GPUs have done nothing for 30 min: it stops in 30 min "
                                   "unless you keep it.", "type": "warning", "actions": ["Keep it", "GPUs page"]}
        # Its own server only, never the dashboard (JupyterHub refuses a page's cookie request to another service).
        assert [a for a in server.asked if "remoteEntry" not in a][:2] == ["GET /user/alice/lab",
                                                                            "GET /user/alice/dsportal/gpus"]
        assert not [a for a in server.asked if PORTAL in a]
        page.clock.run_for(60_000)  # the next look: the same warning is not shown twice
        page.wait_for_timeout(300)
        assert page.evaluate("() => window.__notes.length") == 1

        page.evaluate("() => window.__notes[0].options.actions[0].callback()")  # "Keep it"
        page.wait_for_function("() => window.__notes[0].type === 'success'")
        assert server.posts == [{"holder": "12"}]
        assert page.evaluate("() => window.__notes[0].message") == "Kept: its idle clock starts again."
        page.clock.run_for(60_000)  # kept: no warning any more, so its notice goes
        page.wait_for_function("() => window.__notes[0].open === false")
    finally:
        context.close()


def test_the_status_bar_shows_the_servers_gpus_node_by_node_and_hides_when_none(browser, artifacts):
    context = new_context(browser)
    page = context.new_page()
    server = Server()
    server.warnings, server.server_gpus, server.status_bar = [], SERVER_GPUS, True
    try:
        page.clock.install()
        page.route(f"{ORIGIN}/**", server.answer)
        page.goto(f"{ORIGIN}/user/alice/lab")
        line = page.locator(".dsportal-gpus")
        playwright.expect(line).to_have_text("GPUs 37 %, unknown (FAKE)")
        assert line.get_attribute("title") == (
            "slurm-node1 GPU 0: 37 % busy, 1200 of 16384 MiB (FAKE GPU: busy is the stand-in's, from the server's CPU "
            "time)\nslurm-node2 GPU 1: unknown (no reading for 75 s: the node's reader stopped) (FAKE GPU: busy is "
            "the stand-in's, from the server's CPU time)\nClick for the portal's GPUs page.")
        page.screenshot(path=str(artifacts / "lab-server-gpus.png"))
        server.server_gpus = [{**SERVER_GPUS[0], "busy": 92.0, "source": "nvml"}]  # a real GPU, at work
        page.clock.run_for(60_000)
        playwright.expect(line).to_have_text("GPU 92 %")
        server.server_gpus = []  # the server holds none any more: no line
        page.clock.run_for(60_000)
        playwright.expect(line).to_be_hidden()
        assert page.evaluate("() => window.__notes.length") == 0  # no warning: no notice
    finally:
        context.close()

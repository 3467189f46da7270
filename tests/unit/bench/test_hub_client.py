"""bench.hub_client's pure parts; the integration suites drive the rest against the test box's hub."""

import http.server
import json
import threading

import pytest
import requests
from kubernetes.client.exceptions import ApiException

from bench.hub_client import HubClient, HubError, NotYet, wait_for, xsrf_of


def test_the_xsrf_token_is_read_from_the_form_and_a_page_without_one_is_named():
    assert xsrf_of('<form><input type="hidden" name="_xsrf" value="2|ab|cd"/></form>') == "2|ab|cd"
    with pytest.raises(HubError, match="no _xsrf field"):
        xsrf_of("<html>502 Bad Gateway</html>")


def test_wait_for_returns_the_first_true_value_and_names_what_it_waited_for():
    answers = iter([None, 0, {"ready": True}])
    assert wait_for(lambda: next(answers), 5, interval=0.01) == {"ready": True}
    with pytest.raises(TimeoutError, match="timed out after 0 s waiting for alice's server"):
        wait_for(lambda: None, 0.05, interval=0.01, what="alice's server")


def test_a_question_that_could_not_be_asked_is_a_not_yet_and_is_named_at_the_end():
    """A read timeout or refused connection while a server restarts (the hub pod's, issue 38) is not the wait's
    end; a predicate's own verdict (an AssertionError, a HubError) still is."""
    answers = iter([requests.ReadTimeout("read timed out"), requests.ConnectionError("refused"),
                    FileNotFoundError("no pid file yet"), "up"])

    def ask():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer
    assert wait_for(ask, 5, interval=0.01) == "up"
    with pytest.raises(TimeoutError, match=r"waiting for the hub \(its last answer was not a success: "
                                           r"ConnectionError: refused\)"):
        wait_for(lambda: (_ for _ in ()).throw(requests.ConnectionError("refused")), 0.05, interval=0.01,
                 what="the hub")
    with pytest.raises(HubError, match="the hub exited"):
        wait_for(lambda: (_ for _ in ()).throw(HubError("the hub exited")), 5, interval=0.01)


def test_an_answer_that_is_not_a_success_is_a_not_yet_whatever_its_kind():
    """Issue 49: the proxy's plain "Service Unavailable" (503) while the hub pod restarted ended a wait through
    `.json()`. Status, body and transport are all "not yet" until the deadline."""
    unavailable = requests.Response()
    unavailable.status_code, unavailable._content = 503, b"Service Unavailable"
    gone: dict | None = None  # the hub lists no server while it restarts
    faults = [lambda: unavailable.json(), unavailable.raise_for_status, lambda: {"servers": {}}["servers"][""],
              lambda: gone["ready"], lambda: (_ for _ in ()).throw(ApiException(status=503)),
              lambda: (_ for _ in ()).throw(NotYet("the hub lists no server yet"))]
    for fault in faults:
        with pytest.raises(TimeoutError, match="its last answer was not a success"):
            wait_for(fault, 0.03, interval=0.01, what="a server")


class FlakyHub(http.server.BaseHTTPRequestHandler):
    """A hub's users API behind a proxy that answers 503 in plain text twice, then the hub's JSON."""
    answers = [(503, "text/plain", b"Service Unavailable"), (503, "text/plain", b"Service Unavailable")]

    def do_GET(self):  # noqa: N802 (http.server's name)
        status, kind, body = (FlakyHub.answers.pop(0) if FlakyHub.answers else
                              (200, "application/json", json.dumps({"servers": {"": {"ready": True}}}).encode()))
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_the_clients_server_read_through_a_restarting_proxy_is_waited_for_not_failed():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FlakyHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = HubClient(f"http://127.0.0.1:{server.server_address[1]}")
        with pytest.raises(requests.HTTPError):  # outside a wait, the 503 is an error that says so
            client.server("alice")
        assert wait_for(lambda: client.server("alice")["ready"], 10, interval=0.01, what="her server")
        assert not FlakyHub.answers
    finally:
        server.shutdown()

"""bench.hub_client's pure parts; the integration suites drive the rest against the test box's hub."""

import pytest
import requests

from bench.hub_client import HubError, wait_for, xsrf_of


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
    with pytest.raises(TimeoutError, match=r"waiting for the hub \(its last question could not be asked: "
                                           r"ConnectionError: refused\)"):
        wait_for(lambda: (_ for _ in ()).throw(requests.ConnectionError("refused")), 0.05, interval=0.01,
                 what="the hub")
    with pytest.raises(HubError, match="the hub exited"):
        wait_for(lambda: (_ for _ in ()).throw(HubError("the hub exited")), 5, interval=0.01)

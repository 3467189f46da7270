"""tests.answers.masked: the per-request bytes of two answers are masked, and nothing else is."""

from tests.answers import masked

# Two real tokens of one session, one second apart (the hub's page.html and tornado's hidden form field).
PAGE = (b'<script>window.jhdata = {\n  xsrf_token: "%s",\n};</script>'
        b'<form><input type="hidden" name="_xsrf" value="%s"/>')
EARLIER = b"MnwxOjB8MTA6MTc5NTU3ODMyOXw1Ol94c3JmfDYwOk9rNVdZ"
LATER = b"MnwxOjB8MTA6MTc5NTU3ODMzMHw1Ol94c3JmfDYwOk9rNVdZ"


def test_the_same_page_a_second_later_is_the_same_answer():
    assert PAGE % (EARLIER, EARLIER) != PAGE % (LATER, LATER)
    assert masked(PAGE % (EARLIER, EARLIER)) == masked(PAGE % (LATER, LATER))
    assert EARLIER not in masked(PAGE % (EARLIER, EARLIER))


def test_everything_else_still_differs():
    assert masked(PAGE % (EARLIER, EARLIER) + b"job 12") != masked(PAGE % (LATER, LATER) + b"job 13")
    assert masked(b'xsrf_token: "a", user: "alice"') != masked(b'xsrf_token: "a", user: "bob"')

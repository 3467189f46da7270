"""Comparing two answers for what they say: the bytes that differ from one request to the next for the same thing
are masked first. Two pages compared byte for byte without this differ whenever the two requests fall on either
side of a second (the XSRF token carries a timestamp and is signed).

Each pattern names where its bytes come from; `masked` leaves everything else as it is, so a real difference
between two answers still shows.
"""

from __future__ import annotations

import re

PER_REQUEST = (
    re.compile(rb'(xsrf_token: ")[^"]*(")'),  # the hub's page.html: window.jhdata's token, signed with a timestamp
    re.compile(rb'(name="_xsrf" value=")[^"]*(")'),  # tornado's xsrf_form_html(), the same token in every form
    re.compile(rb'( nonce=")[^"]*(")'),  # the CSP nonce of each page's inline scripts and styles (a new one each time)
)
MASK = rb"\1<per-request>\2"


def masked(body: bytes) -> bytes:
    """The body with every per-request value replaced by `<per-request>`."""
    for pattern in PER_REQUEST:
        body = pattern.sub(MASK, body)
    return body

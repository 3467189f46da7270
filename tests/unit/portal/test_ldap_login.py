"""The password-policy response control as slapd sends it (portal.ldap_login), decoded from bytes alone: the
real binds against slapd are tests/integration/test_directory.py's."""

import pytest

from portal.ldap_login import ACCOUNT_LOCKED, ppolicy_error


@pytest.mark.parametrize(("value", "error"), [
    (b"0\x03\x81\x01\x01", ACCOUNT_LOCKED),  # slapd 2.5.13's answer to a locked account's bind (captured)
    (b"0\x00", None),  # a bind with nothing to say
    (b"0\x07\xa0\x02\x81\x00\x81\x01\x02", 2),  # a warning (graceAuthNsRemaining) before the error: changeAfterReset
    (b"0\x81\x03\x81\x01\x01", ACCOUNT_LOCKED),  # a long-form length
    (b"0\x05\xa0\x03\x80\x01\x05", None),  # a warning only (timeBeforeExpiration)
])
def test_the_error_is_read_from_the_control(value, error):
    assert ppolicy_error(value) == error


@pytest.mark.parametrize("value", [b"", b"0", b"0\x05\x81\x01\x01", b"1\x03\x81\x01\x01", b"0\x03\x81\x09\x01",
                                   b"0\x85\xff\xff\xff\xff\xff", b"0\x02\x81\x00", b"\xff" * 64])
def test_bytes_that_are_not_a_control_say_nothing(value):
    assert ppolicy_error(value) is None

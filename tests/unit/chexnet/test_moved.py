"""The names the template notebooks imported from chexnet before the program kit (issue 64) still import, as the
kit's own modules, saying where each is now: a notebook a user copied before keeps running."""

from __future__ import annotations

import importlib
import sys

import pytest


@pytest.mark.parametrize(("old", "new"), [("chexnet.model_card", "programkit.model_card"),
                                          ("chexnet.labels", "programkit.labels"),
                                          ("chexnet.metrics", "programkit.metrics"),
                                          ("chexnet.data.sources", "programkit.data.sources")])
def test_an_old_name_is_the_kits_module_with_a_warning_naming_the_new_one(old, new, monkeypatch):
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(FutureWarning, match=rf"{old} is now {new} \(the program kit\); import it from there"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)

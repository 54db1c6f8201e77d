"""attndsl runs from a checkout that is not installed (PYTHONPATH at the repository, as on a
GPU machine where nothing can be installed): the grammar and the language reference it ships
as data are read from the repository's folders there."""

from __future__ import annotations

import subprocess
import sys
import sysconfig

from .conftest import ROOT

SCRIPT = """
import sys
sys.path[:0] = [{root!r}, {site!r}]  # -S: no .pth files, so no installed attndsl
import attndsl
assert attndsl.__file__.startswith({root!r}), attndsl.__file__
from attndsl.editor import hover
layer = attndsl.loads("attention a {{\\n d_model = 64\\n heads = 4\\n}}\\n")["a"]
assert layer.spec.heads == 4
text = "attention a {{\\n    d_model = 64\\n    heads = 4\\n    softcap = none\\n}}\\n"
assert "tanh" in hover(text, 3, 6)
print("ok")
"""


def test_a_checkout_runs_without_installing(tmp_path) -> None:
    site = sysconfig.get_paths()["purelib"]
    done = subprocess.run([sys.executable, "-S", "-c", SCRIPT.format(root=str(ROOT), site=site)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]

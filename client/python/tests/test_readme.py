"""The README's Python quick start runs as written (against the test server's address)."""

from __future__ import annotations

import contextlib
import io
import re

from conftest import REPO


def quick_start() -> str:
    text = (REPO / "README.md").read_text()
    section = text.split("## Python", 1)[1]
    m = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert m, "README has no Python quick start"
    return m.group(1)


def test_quick_start(addr):
    code = quick_start()
    assert len(code.strip().splitlines()) == 5
    assert '"127.0.0.1:50051"' in code
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code.replace("127.0.0.1:50051", addr), "README.md", "exec"), {})
    assert "Reward(type='question_f1', value=1.0" in buf.getvalue()

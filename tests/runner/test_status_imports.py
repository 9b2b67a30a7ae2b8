"""`madbench status` is a quick look: it reads the manifest and result files without importing Ray, the statistics or
the report (scipy and plotly were most of its start-up)."""

import subprocess
import sys

from tests.runner.test_batch import ROOT


def test_the_status_command_imports_neither_ray_nor_scipy_nor_plotly():
    code = ("import sys; from madbench.runner.cli import commands; import importlib; "
            "importlib.import_module(commands.group_of('status').module); "
            "print(sorted(m for m in ('ray', 'scipy', 'plotly', 'litellm') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    assert out.strip() == "[]"

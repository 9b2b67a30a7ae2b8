"""The one folder madbench writes to outside the working directory: ``$MADBENCH_HOME``, default ``~/.cache/madbench``.

Each kind of file has its folder there, named once here: the LLM response cache (``llm/``; ``MADBENCH_CACHE_DIR`` or
``--cache-dir`` put it elsewhere), the offline model file with its server's state, lock and log (``models/``;
``MADBENCH_MODEL_DIR`` overrides), raw downloads of `madbench data fetch` (``raw/``) and the session folders of a local
Ray (``ray/``).
"""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "MADBENCH_HOME"
DEFAULT_HOME = "~/.cache/madbench"
#: The folder of each kind of file under the home.
LLM_CACHE, MODELS, RAW, RAY = "llm", "models", "raw", "ray"


def madbench_home() -> Path:
    """``$MADBENCH_HOME`` (an empty value counts as unset), else ``~/.cache/madbench``, with ``~`` expanded; a relative
    one is taken from the current folder and made absolute here (Ray refuses a relative temp folder, and a socket
    path's length is that of the absolute path)."""
    return Path(os.environ.get(HOME_ENV) or DEFAULT_HOME).expanduser().absolute()


def home_path(kind: str) -> Path:
    """The folder of one kind of file (``LLM_CACHE``, ``MODELS``, ``RAW``, ``RAY``) under the home."""
    return madbench_home() / kind

"""Where the project's own files live: the checkout (or installed tree) and its ``configs/``."""

from __future__ import annotations

from pathlib import Path

#: The ``madbench`` package folder.
PACKAGE_DIR = Path(__file__).resolve().parents[1]
#: The checkout this package runs from (for an installed wheel, the folder it was installed into).
PROJECT_ROOT = PACKAGE_DIR.parent
#: The shipped configs: the checkout's ``configs/``, or the copy a wheel installs as ``madbench/configs``.
CONFIGS_DIR = PROJECT_ROOT / "configs" if (PROJECT_ROOT / "configs").is_dir() else PACKAGE_DIR / "configs"

#: The longest name a batch or debate config may have: a batch's name is its results directory's name (with
#: ``@<model>`` after it under ``--model``), and most file systems refuse a path component over 255 bytes.
MAX_NAME_LENGTH = 100
#: The longest path component madbench creates (NAME_MAX on Linux and macOS is 255 bytes).
MAX_DIR_NAME_BYTES = 255

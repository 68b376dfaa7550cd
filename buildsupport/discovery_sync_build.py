"""The build backend of this repository: setuptools' own (``setuptools.build_meta``), less one
notice that does not apply to it.

The package is laid out flat, with two folders mapped into it (setup.cfg's ``package_dir``:
``backends`` -> ``discovery_sync.backends``, ``tools`` -> ``discovery_sync.tools``). For any
layout but ``src/`` (a ``package_dir`` of ``{"": "src"}`` alone), setuptools makes an editable
install with an import hook that maps each package to its folder, and says on every editable
install (as an ``InformationOnly`` warning) that "folders in your working directory with the
same name as your package ... may take precedence during imports". No setting turns that off
short of moving the sources under ``src/``. Here the folder that takes precedence when a command
runs in the checkout is ``discovery_sync/`` itself: the very files the hook maps, and the hook
still finds ``discovery_sync.backends`` and ``.tools`` beside it. So :func:`build_editable`
leaves out that one notice (matched by its text); every other warning, and every other hook of
setuptools.build_meta, is setuptools' own and unchanged. Wheels and sdists are built as before.
"""

from __future__ import annotations

import warnings
from typing import Any

from setuptools import build_meta
from setuptools.build_meta import *  # noqa: F403  (every hook PEP 517 and PEP 660 name, as setuptools has it)

#: the notice setuptools gives on every editable install of a layout that is not ``src/`` (its
#: wording since setuptools 65; later versions put a title and a frame of asterisks around it)
EDITABLE_NOTICE = r"(?s).*Please be careful with folders in your working directory with the same\s+name as your package"


def build_editable(
    wheel_directory: str,
    config_settings: dict[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    """``setuptools.build_meta.build_editable``, without the notice about folders named as the
    package in the working directory (see the module's docstring); returns the wheel's name."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=EDITABLE_NOTICE)
        name: str = build_meta.build_editable(wheel_directory, config_settings, metadata_directory)
    return name

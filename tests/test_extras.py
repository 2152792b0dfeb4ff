"""Install hints name what pip can install: the packages of an extra, never ``gpu-kpi[...]``
(gpu-kpi is on no package index), and every extra a hint names exists."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from tracker.extras import extra_requirements, install_hint

ROOT = Path(__file__).resolve().parents[1]


def test_an_extra_is_its_packages_with_the_extras_it_names() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    got = extra_requirements("parquet")
    assert got is not None and "pyarrow>=14" in got
    # parquet = gpu-kpi[reports] + pyarrow: the reports extra's packages, expanded
    assert all(any(r.startswith(p.split(">")[0]) for r in got) for p in extras["reports"])
    assert not any("gpu-kpi" in r for r in got)
    assert extra_requirements("no-such-extra") is None


def test_a_hint_is_a_pip_command_of_packages() -> None:
    hint = install_hint("postgres")
    assert hint == "pip install 'psycopg[binary]>=3.1'"
    assert install_hint("no-such-extra") == "pip install '.[no-such-extra]' in the gpu-kpi checkout"
    # the one package a caller found missing, of the extra
    assert install_hint("parquet", "pyarrow") == "pip install 'pyarrow>=14'"


def test_no_message_names_a_package_no_index_has() -> None:
    extras = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    )
    for path in [*(ROOT / "tracker").rglob("*.py"), *(ROOT / "reports").rglob("*.py")]:
        text = path.read_text()
        assert "pip install 'gpu-kpi[" not in text, path
        for name in re.findall(r"install_hint\(['\"]([^'\"]+)['\"]\)", text):
            assert name in extras, f"{path}: install_hint({name!r}) names no extra"

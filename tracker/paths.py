"""Where gpu-kpi keeps its files on this machine, by the platform's conventions (the only
``platformdirs`` importer). Computed when asked, never at import."""

from __future__ import annotations

from pathlib import Path

APP = "gpu-kpi"


def config_dir() -> Path:
    """``~/.config/gpu-kpi`` on Linux: the default ``config.toml`` lives here."""
    import platformdirs

    return Path(platformdirs.user_config_dir(APP))


def data_dir() -> Path:
    """``~/.local/share/gpu-kpi`` on Linux: the default SQLite store and the spool."""
    import platformdirs

    return Path(platformdirs.user_data_dir(APP, appauthor=False))

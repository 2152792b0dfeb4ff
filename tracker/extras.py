"""How to install what an optional part of gpu-kpi needs, in words pip takes wherever gpu-kpi
came from: an extra of gpu-kpi's own name names a package no index has (gpu-kpi is
installed from a checkout or a wheel), so a hint names the packages themselves."""

from __future__ import annotations

import re
import shlex

DIST = "gpu-kpi"
_EXTRA = re.compile(r"""extra\s*==\s*["']([^"']+)["']""")
_SELF = re.compile(r"^gpu-kpi\[([^\]]+)\]$")


def extra_requirements(extra: str) -> list[str] | None:
    """The packages the ``extra`` of the installed gpu-kpi adds (``pyarrow>=14``, and those of
    an extra it names, ``gpu-kpi[reports]``), in the order its metadata gives them; None
    where gpu-kpi is not installed (a bare checkout on ``sys.path``) or has no such extra."""
    from importlib.metadata import PackageNotFoundError, requires

    try:
        reqs = requires(DIST) or []
    except PackageNotFoundError:
        return None
    by_extra: dict[str, list[str]] = {}
    for r in reqs:
        spec, _, marker = r.partition(";")
        if m := _EXTRA.search(marker):
            by_extra.setdefault(m[1], []).append(spec.strip())
    if extra not in by_extra:
        return None
    out: list[str] = []

    def add(name: str, seen: set[str]) -> None:
        for spec in by_extra.get(name, []):
            if m := _SELF.match(spec):
                for inner in m[1].split(","):
                    if inner.strip() not in seen:
                        add(inner.strip(), seen | {inner.strip()})
            elif spec not in out:
                out.append(spec)

    add(extra, {extra})
    return out


def install_hint(extra: str, *only: str) -> str:
    """``pip install 'pyarrow>=14'``: the packages of gpu-kpi's ``extra`` not installed yet
    (all of them where each is), or those of them named ``only`` (the one a caller found
    missing); in a checkout that was never installed, ``pip install '.[extra]'`` there."""
    reqs = extra_requirements(extra)
    if not reqs:
        return f"pip install '.[{extra}]' in the gpu-kpi checkout"
    if only:
        named = [r for r in reqs if _name(r).lower() in {o.lower() for o in only}]
        return "pip install " + " ".join(shlex.quote(r) for r in named or reqs)
    missing = [r for r in reqs if not _installed(r)]
    return "pip install " + " ".join(shlex.quote(r) for r in missing or reqs)


def _name(spec: str) -> str:
    """The distribution a requirement names (``pyarrow`` of ``pyarrow>=14``)."""
    m = re.match(r"[A-Za-z0-9_.-]+", spec)
    return m[0] if m else spec


def _installed(spec: str) -> bool:
    """Whether the distribution a requirement names is installed (any version)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        version(_name(spec))
    except PackageNotFoundError:
        return False
    return True

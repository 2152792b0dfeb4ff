"""Which GPUs are this process's own: CUDA's ``CUDA_VISIBLE_DEVICES`` rules and ``LOCAL_RANK``,
as pure functions of the values (no NVML, no environment read here)."""

from __future__ import annotations

from collections.abc import Sequence

from tracker.gpu.base import BackendUnavailable


def visible_devices(cvd: str | None, nvml_devices: Sequence[tuple[str, str]]) -> list[str]:
    """The UUIDs CUDA makes visible, in CUDA ordinal order, following CUDA's own rules.

    ``cvd`` is the value of ``CUDA_VISIBLE_DEVICES`` (``None`` when unset). ``nvml_devices`` is
    ``(uuid, kind)`` per device, ``kind`` being ``"gpu"`` (physical GPUs, in NVML index order)
    or ``"mig"`` (MIG devices that may be named in ``cvd``).

    Unset: every GPU in NVML order. Each comma-separated entry is an index into the GPUs, a
    ``GPU-…`` UUID or a ``MIG-…`` UUID, either possibly shortened to a unique prefix. As CUDA
    does, the first invalid, ambiguous or repeated entry ends the list, so ``""`` shows nothing.
    Indices assume CUDA's order is NVML's (PCI bus order), true for identical GPUs or with
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID``.
    """
    gpus = [uuid for uuid, kind in nvml_devices if kind == "gpu"]
    if cvd is None:
        return gpus
    pools = {"GPU-": gpus, "MIG-": [uuid for uuid, kind in nvml_devices if kind == "mig"]}
    out: list[str] = []
    for raw in cvd.split(","):
        token = raw.strip()
        uuid: str | None = None
        if token.isascii() and token.isdigit():
            uuid = gpus[int(token)] if int(token) < len(gpus) else None
        elif token[:4] in pools and len(token) > 4:
            hits = [u for u in pools[token[:4]] if u.startswith(token)]
            uuid = hits[0] if len(hits) == 1 else None
        if uuid is None or uuid in out:
            break
        out.append(uuid)
    return out


def select_devices(
    visible: Sequence[str], devices: Sequence[int] | None, local_rank: str | None
) -> list[int]:
    """CUDA ordinals (positions in ``visible``) that belong to this process.

    ``devices`` wins when given; else, with ``LOCAL_RANK`` set and more than one visible GPU,
    that one GPU (all of them when ``LOCAL_RANK`` is out of range); else every visible GPU.
    Raises :class:`BackendUnavailable` for a requested ordinal that is not visible.
    """
    if devices is not None:
        bad = [d for d in devices if not 0 <= d < len(visible)]
        if bad:
            raise BackendUnavailable(
                f"CUDA device {bad[0]} is not visible: this process sees {len(visible)} GPU(s)"
            )
        return list(dict.fromkeys(devices))
    if local_rank is not None and len(visible) > 1:
        rank = int(local_rank) if local_rank.strip().isdigit() else -1
        if 0 <= rank < len(visible):
            return [rank]
    return list(range(len(visible)))

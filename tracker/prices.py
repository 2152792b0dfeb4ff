"""GPU models and their prices (USD per GPU-hour, on-demand), every row with its source and date.

The default table is a starting point; users override rows per run (``price_per_gpu_hour=``),
per config file (``[prices]`` in the TOML) or per environment; a model the user owns
(``[owned.<MODEL>]``) is priced at its amortized rate instead (:mod:`tracker.owned`). Model names from NVML
(``NVIDIA H100 80GB HBM3``) are mapped to the table's keys by :func:`canonical_gpu`, the most
specific first: a variant (``H100-NVL``) is its own key, priced by its base model's row
(``H100``) until it has one; :mod:`tracker.peaks` keys its peaks the same way.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tracker.owned import OwnedGpu, owned_prices

log = logging.getLogger("gpu_kpi")


class UnknownGpu(ValueError):
    """A GPU model the price table does not know."""


@dataclass(frozen=True, kw_only=True)
class Price:
    gpu: str
    """Canonical model key, e.g. ``H100``."""
    usd_per_gpu_hour: float
    as_of: str
    """When the price was seen, ``YYYY-MM``."""
    source: str
    """Where it was seen, or ``override`` / ``config`` for a user's own price."""
    description: str = ""
    mem_gib: float | None = None
    """Device memory of the model, GB as sold (for right-sizing: does a run fit on it)."""


DEFAULT_PRICES: tuple[Price, ...] = (
    Price(
        gpu="H200",
        mem_gib=141,
        usd_per_gpu_hour=4.50,
        as_of="2026-09",
        description="H200 141GB",
        source="RunPod 3.59-4.59, Nebius 4.50",
    ),
    Price(
        gpu="H100",
        mem_gib=80,
        usd_per_gpu_hour=3.85,
        as_of="2026-09",
        description="H100 SXM 80GB",
        source="RunPod 2.69-3.49, Lambda 4.29, Nebius 3.85; AWS p5 6.88/GPU (2026-11)",
    ),
    Price(
        gpu="A100-80GB",
        mem_gib=80,
        usd_per_gpu_hour=2.00,
        as_of="2026",
        description="A100 80GB",
        source="RunPod 1.39-1.59, Modal 2.50; AWS p4de 3.43/GPU (2026-11)",
    ),
    Price(
        gpu="A100-40GB",
        mem_gib=40,
        usd_per_gpu_hour=1.99,
        as_of="2026-09",
        description="A100 40GB",
        source="Lambda 1.99; AWS p4d 2.74/GPU (2026-11)",
    ),
    Price(
        gpu="L40S",
        mem_gib=48,
        usd_per_gpu_hour=1.55,
        as_of="2026-09",
        description="L40S 48GB",
        source="RunPod 0.79-1.09, Nebius 1.55",
    ),
    Price(
        gpu="L4",
        mem_gib=24,
        usd_per_gpu_hour=0.80,
        as_of="2026",
        description="L4 24GB",
        source="AWS g6.xlarge 0.805, Modal 0.80",
    ),
    Price(
        gpu="A10G",
        mem_gib=24,
        usd_per_gpu_hour=1.01,
        as_of="2026",
        description="A10G 24GB",
        source="AWS g5.xlarge 1.006",
    ),
    Price(
        gpu="T4",
        mem_gib=16,
        usd_per_gpu_hour=0.53,
        as_of="2026",
        description="T4 16GB",
        source="AWS g4dn.xlarge 0.526",
    ),
    Price(
        gpu="V100",
        mem_gib=16,
        usd_per_gpu_hour=3.06,
        as_of="older",
        description="V100 16GB",
        source="AWS p3.2xlarge 3.06",
    ),
    # workstation, consumer and older data-center GPUs, as real logs are full of them: a
    # marketplace's on-demand rate (RunPod, Vast.ai) or a cloud's list price, per GPU
    Price(
        gpu="V100S",
        mem_gib=32,
        usd_per_gpu_hour=0.88,
        as_of="2025",
        description="V100S 32GB",
        source="OVHcloud t2-le-45 0.88/GPU (list, 2025)",
    ),
    Price(
        gpu="L40",
        mem_gib=48,
        usd_per_gpu_hour=0.99,
        as_of="2025",
        description="L40 48GB",
        source="RunPod secure cloud 0.99 (2025)",
    ),
    Price(
        gpu="RTX-6000-Ada",
        mem_gib=48,
        usd_per_gpu_hour=0.77,
        as_of="2025",
        description="RTX 6000 Ada Generation 48GB",
        source="RunPod community cloud 0.74-0.77 (2025)",
    ),
    Price(
        gpu="RTX-A6000",
        mem_gib=48,
        usd_per_gpu_hour=0.49,
        as_of="2025",
        description="RTX A6000 48GB",
        source="RunPod community cloud 0.49, Vast.ai 0.40-0.50 (2025)",
    ),
    Price(
        gpu="RTX-A5000",
        mem_gib=24,
        usd_per_gpu_hour=0.29,
        as_of="2025",
        description="RTX A5000 24GB",
        source="RunPod community cloud 0.26-0.29 (2025)",
    ),
    Price(
        gpu="RTX-A4000",
        mem_gib=16,
        usd_per_gpu_hour=0.2,
        as_of="2025",
        description="RTX A4000 16GB",
        source="RunPod community cloud 0.17-0.20 (2025)",
    ),
    Price(
        gpu="RTX-4090",
        mem_gib=24,
        usd_per_gpu_hour=0.39,
        as_of="2025",
        description="GeForce RTX 4090 24GB",
        source="RunPod community cloud 0.34-0.44, Vast.ai 0.30-0.40 (2025)",
    ),
    Price(
        gpu="RTX-4080",
        mem_gib=16,
        usd_per_gpu_hour=0.27,
        as_of="2025",
        description="GeForce RTX 4080 16GB",
        source="Vast.ai 0.20-0.30 (2025)",
    ),
    Price(
        gpu="RTX-3090",
        mem_gib=24,
        usd_per_gpu_hour=0.22,
        as_of="2025",
        description="GeForce RTX 3090 24GB",
        source="RunPod community cloud 0.22, Vast.ai 0.15-0.25 (2025)",
    ),
    Price(
        gpu="RTX-3080",
        mem_gib=10,
        usd_per_gpu_hour=0.13,
        as_of="2025",
        description="GeForce RTX 3080 10GB",
        source="Vast.ai 0.10-0.15 (2025)",
    ),
    Price(
        gpu="TITAN-RTX",
        mem_gib=24,
        usd_per_gpu_hour=0.18,
        as_of="2025",
        description="TITAN RTX 24GB",
        source="Vast.ai 0.15-0.20 (2025)",
    ),
    Price(
        gpu="P100",
        mem_gib=16,
        usd_per_gpu_hour=1.46,
        as_of="2025",
        description="Tesla P100 16GB",
        source="Google Cloud nvidia-tesla-p100 1.46 (us-central1 list)",
    ),
    Price(
        gpu="P40",
        mem_gib=24,
        usd_per_gpu_hour=0.15,
        as_of="2025",
        description="Tesla P40 24GB",
        source="Vast.ai 0.10-0.20 (2025)",
    ),
    Price(
        gpu="K80",
        mem_gib=12,
        usd_per_gpu_hour=0.9,
        as_of="older",
        description="Tesla K80 (per GPU)",
        source="AWS p2.xlarge 0.90 (one K80 GPU)",
    ),
)


def _word(name: str) -> str:
    """A pattern for ``name`` as a whole word: ``L4`` is not the start of ``L40``."""
    return rf"(?<![A-Z0-9]){name}(?![A-Z0-9])"


@dataclass(frozen=True, kw_only=True)
class GpuModel:
    """A GPU model the tables know: its key, how to recognise its name, and which model's
    price row it falls back to."""

    key: str
    """Table key, e.g. ``H100-NVL``: the price, peak and recorded-run key."""
    pattern: str
    """Regular expression searched in the upper-cased name (NVML's or a user's)."""
    base: str | None = None
    """For a variant (``H100-NVL``), the model whose price row applies until the variant has
    one of its own (``H100``); peaks are never borrowed from the base."""
    mem_gib: float | None = None
    """Device memory as sold, GB, for a row the user prices (right-sizing: does a run fit)."""
    description: str = ""
    datacenter: bool = True
    """A data-center part; False for workstation and GeForce cards, which right-sizing never
    suggests (their prices are a marketplace's, and their licence keeps them out of most data
    centers)."""


# Ordered, most specific first: the first pattern that matches the upper-cased name wins
# (GH200 before H200 before H20, the variants before their base, GB200 before B200, L40S
# before L40 before L4, A10G before A10; A100, A10, A2 as whole words so that the RTX A1000 or
# A2000 is none of them).
MODELS: tuple[GpuModel, ...] = (
    GpuModel(key="GH200", pattern=r"GH200", description="GH200 Grace Hopper"),
    GpuModel(
        key="H200-NVL", pattern=r"H200.*NVL", base="H200", mem_gib=141, description="H200 NVL 141GB"
    ),
    GpuModel(key="H200", pattern=r"H200", mem_gib=141, description="H200 141GB"),
    # NVML names the PCIe card "H100 PCIe" or by its memory, HBM2e (the SXM5 part has HBM3)
    GpuModel(
        key="H100-PCIe",
        pattern=r"H100.*(PCIE|HBM2E)",
        base="H100",
        mem_gib=80,
        description="H100 PCIe 80GB",
    ),
    GpuModel(
        key="H100-NVL", pattern=r"H100.*NVL", base="H100", mem_gib=94, description="H100 NVL 94GB"
    ),
    GpuModel(key="H100", pattern=r"H100", mem_gib=80, description="H100 SXM 80GB"),
    GpuModel(
        key="H800-PCIe",
        pattern=r"H800.*PCIE",
        base="H800",
        mem_gib=80,
        description="H800 PCIe 80GB",
    ),
    GpuModel(key="H800", pattern=r"H800", mem_gib=80, description="H800 SXM 80GB"),
    GpuModel(key="H20", pattern=_word("H20"), mem_gib=96, description="H20 96GB"),
    GpuModel(key="GB300", pattern=r"GB300", description="GB300"),
    # per GPU, from NVIDIA's GB200 NVL72 per-GPU column
    GpuModel(key="GB200", pattern=r"GB200", mem_gib=186, description="GB200 186GB"),
    GpuModel(key="B300", pattern=_word("B300"), description="B300"),
    # 180 GB as NVIDIA sells it (HGX/DGX B200); the package carries 192 GB of HBM3e
    GpuModel(key="B200", pattern=_word("B200"), mem_gib=180, description="B200 180GB"),
    GpuModel(
        key="A100-80GB",
        pattern=r"(?<![A-Z0-9])A100(?!\d).*80\s*G",
        mem_gib=80,
        description="A100 80GB",
    ),
    GpuModel(
        key="A100-40GB", pattern=r"(?<![A-Z0-9])A100(?!\d)", mem_gib=40, description="A100 40GB"
    ),
    GpuModel(key="A800", pattern=_word("A800"), description="A800"),
    GpuModel(key="A10G", pattern=r"A10G", mem_gib=24, description="A10G 24GB"),
    GpuModel(key="A10", pattern=_word("A10"), mem_gib=24, description="A10 24GB"),
    GpuModel(key="A30", pattern=_word("A30"), mem_gib=24, description="A30 24GB"),
    GpuModel(key="A40", pattern=_word("A40"), mem_gib=48, description="A40 48GB"),
    GpuModel(key="A2", pattern=_word("A2"), mem_gib=16, description="A2 16GB"),
    GpuModel(key="L40S", pattern=r"L40S", mem_gib=48, description="L40S 48GB"),
    GpuModel(key="L40", pattern=_word("L40"), mem_gib=48, description="L40 48GB"),
    GpuModel(key="L20", pattern=_word("L20"), mem_gib=48, description="L20 48GB"),
    GpuModel(key="L4", pattern=_word("L4"), mem_gib=24, description="L4 24GB"),
    GpuModel(key="T4", pattern=_word("T4"), mem_gib=16, description="T4 16GB"),
    GpuModel(key="V100S", pattern=r"V100S", mem_gib=32, description="V100S 32GB"),
    GpuModel(key="V100", pattern=r"V100", mem_gib=16, description="V100 16GB"),
    # NVML names the form factor (Tesla P100-SXM2-16GB): the SXM2 part's clocks are higher
    GpuModel(
        key="P100-SXM2",
        pattern=r"P100.*SXM2",
        base="P100",
        mem_gib=16,
        description="Tesla P100 SXM2 16GB",
    ),
    GpuModel(key="P100", pattern=_word("P100"), mem_gib=16, description="Tesla P100 16GB"),
    GpuModel(key="P40", pattern=_word("P40"), mem_gib=24, description="Tesla P40 24GB"),
    GpuModel(key="K80", pattern=_word("K80"), mem_gib=12, description="Tesla K80 (per GPU)"),
    GpuModel(
        key="RTX-A6000",
        pattern=r"RTX[\s_-]*A6000",
        mem_gib=48,
        description="RTX A6000 48GB",
        datacenter=False,
    ),
    GpuModel(
        key="RTX-A5000",
        pattern=r"RTX[\s_-]*A5000",
        mem_gib=24,
        description="RTX A5000 24GB",
        datacenter=False,
    ),
    GpuModel(
        key="RTX-A4000",
        pattern=r"RTX[\s_-]*A4000",
        mem_gib=16,
        description="RTX A4000 16GB",
        datacenter=False,
    ),
    GpuModel(
        key="RTX-4090",
        pattern=r"RTX[\s_-]*4090",
        mem_gib=24,
        description="GeForce RTX 4090 24GB",
        datacenter=False,
    ),
    GpuModel(
        key="RTX-4080",
        pattern=r"RTX[\s_-]*4080",
        mem_gib=16,
        description="GeForce RTX 4080 16GB",
        datacenter=False,
    ),
    GpuModel(
        key="RTX-3090",
        pattern=r"RTX[\s_-]*3090",
        mem_gib=24,
        description="GeForce RTX 3090 24GB",
        datacenter=False,
    ),
    GpuModel(
        key="RTX-3080",
        pattern=r"RTX[\s_-]*3080",
        mem_gib=10,
        description="GeForce RTX 3080 10GB",
        datacenter=False,
    ),
    GpuModel(
        key="TITAN-RTX",
        pattern=r"TITAN[\s_-]*RTX",
        mem_gib=24,
        description="TITAN RTX 24GB",
        datacenter=False,
    ),
    GpuModel(
        key="RTX-PRO-6000",
        pattern=r"RTX[\s_-]*PRO[\s_-]*6000",
        mem_gib=96,
        description="RTX PRO 6000 Blackwell 96GB",
    ),
    GpuModel(
        key="RTX-6000-Ada",
        pattern=r"RTX[\s_-]*6000.*ADA",
        mem_gib=48,
        description="RTX 6000 Ada Generation 48GB",
    ),
    # other vendors' parts, for imported runs (unpriced: a user prices them in [prices])
    GpuModel(key="MI325X", pattern=r"MI325X", mem_gib=256, description="AMD Instinct MI325X"),
    GpuModel(key="MI300X", pattern=r"MI300X", mem_gib=192, description="AMD Instinct MI300X"),
    # one GCD, the device torch sees: half the module's 128 GB
    GpuModel(key="MI250X", pattern=r"MI250X", mem_gib=64, description="AMD Instinct MI250X GCD"),
    GpuModel(
        key="Gaudi3", pattern=r"GAUDI[\s_-]*3|HL-32\d", mem_gib=128, description="Intel Gaudi 3"
    ),
    GpuModel(
        key="Gaudi2", pattern=r"GAUDI[\s_-]*2|HL-22\d", mem_gib=96, description="Intel Gaudi 2"
    ),
)
_BY_KEY: dict[str, GpuModel] = {m.key: m for m in MODELS}


def is_datacenter(key: str) -> bool:
    """Whether the model ``key`` (a table key) is a data-center part (:attr:`GpuModel.datacenter`);
    a key the tables do not know (a user's own) counts as one."""
    model = _BY_KEY.get(key)
    return model is None or model.datacenter


def canonical_gpu(name: str) -> str | None:
    """The most specific table key for a GPU model name (NVML's, a user's or a key itself),
    or None if unknown: the variant where it has one (``H100-NVL``), else the model.

    >>> canonical_gpu("NVIDIA A100-SXM4-80GB")
    'A100-80GB'
    >>> canonical_gpu("NVIDIA H100 NVL")
    'H100-NVL'
    """
    upper = name.strip().upper()
    return next((m.key for m in MODELS if re.search(m.pattern, upper)), None)


def gpu_keys(name: str) -> tuple[str, ...]:
    """The keys a model name is priced by, most specific first: ``("H100-NVL", "H100")`` for
    ``NVIDIA H100 NVL``; empty when the model is unknown."""
    keys: list[str] = []
    key = canonical_gpu(name)
    while key is not None and key not in keys:
        keys.append(key)
        key = _BY_KEY[key].base
    return tuple(keys)


class PriceTable:
    """The default prices with a user's overrides on top.

    A variant without a row of its own is priced by its base model's row: ``NVIDIA H100 NVL``
    pays the ``H100`` row (the default, or the user's ``H100``) until ``H100 NVL`` is priced.
    """

    def __init__(
        self,
        overrides: Mapping[str, float] | None = None,
        *,
        override_source: str = "config",
        base: Iterable[Price] = DEFAULT_PRICES,
    ) -> None:
        self.overrides: dict[str, float] = dict(overrides or {})
        """The user's prices as given (model name → USD per GPU-hour)."""
        self._rows: dict[str, Price] = {p.gpu: p for p in base}
        self._own: list[tuple[re.Pattern[str], str]] = []
        """Models the tables do not know, priced by the user (MI300X, Gaudi 3…): matched to a
        name (``AMD Instinct MI300X``) as a whole word, the longest first."""
        for name, usd in (overrides or {}).items():
            if not usd >= 0:
                raise ValueError(f"price for {name!r} must be a number >= 0, got {usd!r}")
            key = canonical_gpu(name)
            if key is None:  # any model can carry a price
                key = " ".join(name.split())
                if not key:
                    raise UnknownGpu(
                        f"empty GPU model name in price overrides; known: {self.known()}"
                    )
                words = r"\s*".join(re.escape(w) for w in key.upper().split())
                self._own.append((re.compile(rf"(^|[^A-Z0-9]){words}($|[^A-Z0-9])"), key))
                self._own.sort(key=lambda pk: -len(pk[1]))
            known = self._rows.get(key)
            model = _BY_KEY.get(key)
            self._rows[key] = Price(
                gpu=key,
                usd_per_gpu_hour=float(usd),
                as_of="user",
                source=override_source,
                description=(known.description if known else model.description if model else key),
                mem_gib=known.mem_gib if known else model.mem_gib if model else None,
            )

    def known(self) -> str:
        return ", ".join(self._rows)

    def rows(self) -> list[Price]:
        return list(self._rows.values())

    def lookup(self, name: str) -> Price | None:
        """The price row for a model name, or None when nothing prices the model: the most
        specific known key with a row (``H100-NVL``, else ``H100``), else a model the user
        priced by a name of its own."""
        row = next((self._rows[k] for k in gpu_keys(name) if k in self._rows), None)
        if row is not None:
            return row
        upper = name.strip().upper()
        key = next((k for pattern, k in self._own if pattern.search(upper)), None)
        return self._rows.get(key) if key else None

    def get(self, name: str) -> Price:
        """Like :meth:`lookup`, but an unpriced model is an error naming the priced ones."""
        row = self.lookup(name)
        if row is None:
            key = canonical_gpu(name)
            hint = f" (the {key} has no price: set one in [prices])" if key else ""
            raise UnknownGpu(f"unknown GPU model {name!r}{hint}; known: {self.known()}")
        return row


OWNED_SOURCE = "owned (amortized)"
"""The price source of an owned model's amortized rate."""


def owned_table(owned: Mapping[str, OwnedGpu]) -> PriceTable:
    """The owned models alone, each at its amortized rate (source :data:`OWNED_SOURCE`): a
    model name maps to the owned row the way the price table maps names (``NVIDIA H100 NVL``
    to an owned ``H100`` unless ``H100 NVL`` is owned too)."""
    return PriceTable(owned_prices(owned), override_source=OWNED_SOURCE, base=())


def owned_row(
    model: str, owned: Mapping[str, OwnedGpu], overrides: Mapping[str, float] | None = None
) -> Price | None:
    """The owned model's row (its amortized rate) that prices a run on ``model``, or None. A
    variant the user priced in ``[prices]`` (``H100 NVL``) is rented, not the owned base
    model (``H100``): an owned base claims only variants without a price of their own."""
    row = owned_table(owned).lookup(model)
    key = canonical_gpu(model)
    if row is None or key is None or key == row.gpu or not overrides:
        return row
    priced = {canonical_gpu(name) for name in overrides}
    return None if key in priced else row


def reported_price(
    model: object,
    run_price: float | None,
    source: str | None,
    overrides: Mapping[str, float] | None = None,
    owned: Mapping[str, OwnedGpu] | None = None,
) -> tuple[float | None, str | None]:
    """The price the reports charge a stored run, USD per GPU-hour, and the owned model that
    sets it (None: rented). The tracker's order (:func:`price_for`) with today's config: the
    run's own price when it was given one (``source`` "override"), else an owned model's
    amortized rate, else the price the run ran with, else the table's (``overrides`` over the
    built-in prices). Every surface (the report, ``gpu-kpi runs``, chargeback, budgets)
    prices a run with this.

    Args:
        model: The run's GPU model (anything not text: unknown).
        run_price: The price the run ran with (None: none).
        source: Where that price came from (``override``: the run's own).
        overrides: The config's ``[prices]``.
        owned: The config's ``[owned.<MODEL>]``.
    """
    given = run_price if run_price is not None and math.isfinite(run_price) else None
    if given is not None and source == "override":
        return given, None
    if owned and isinstance(model, str):
        row = owned_row(model, owned, overrides)
        if row is not None:
            return row.usd_per_gpu_hour, row.gpu
    if given is not None:
        return given, None
    if not isinstance(model, str):
        return None, None
    table = PriceTable(overrides).lookup(model)
    return (table.usd_per_gpu_hour if table else None), None


def price_for(
    model: str,
    override: float | None = None,
    overrides: Mapping[str, float] | None = None,
    *,
    owned: Mapping[str, OwnedGpu] | None = None,
    set_with: str = "price_per_gpu_hour=",
) -> Price | None:
    """The price a run on ``model`` pays: ``override`` (the run's own), else the amortized rate
    when ``owned`` (the config's ``[owned.<MODEL>]``) has the model, else ``overrides`` (the
    config's ``[prices]``) over the table; None, with a warning, when nothing prices the model.

    Args:
        model: The GPU model as the driver or the log names it.
        override: The run's own price, USD per GPU-hour.
        overrides: The config's ``[prices]``, USD per GPU-hour by model.
        owned: The config's ``[owned.<MODEL>]``.
        set_with: How the caller's user gives a run its price (``price_per_gpu_hour=`` to
            ``track()``, ``--price`` on an import): the warning names it.
    """
    if override is not None:
        return Price(
            gpu=canonical_gpu(model) or model,
            as_of="run",
            usd_per_gpu_hour=float(override),
            source="override",
        )
    if owned:
        try:
            mine = owned_row(model, owned, overrides)
        except (ArithmeticError, ValueError) as e:  # UnknownGpu is a ValueError
            log.warning("gpu-kpi: ignoring [owned]: %s", e)
            mine = None
        if mine is not None:
            return mine
    try:
        price = PriceTable(overrides).lookup(model)
    except (UnknownGpu, ValueError) as e:
        log.warning("gpu-kpi: ignoring price overrides: %s", e)
        price = PriceTable().lookup(model)
    if price is None:
        log.warning(
            "gpu-kpi: no price for GPU model %r: cost is not computed; set %s or [prices] in "
            "the config",
            model,
            set_with,
        )
    return price

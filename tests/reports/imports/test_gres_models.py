"""``[slurm] gres_models``: a site's gres type names read as the GPU models they stand for
(``a100`` says no size; the table would read it as the 40 GB card), so a job no sample covers is
priced as the card it held."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clirun import gpu_kpi

SACCT = "\n".join(
    [
        "Cluster|JobID|JobIDRaw|JobName|User|Account|Partition|State|Start|End|AllocTRES|NodeList",
        "c1|501|501|train|ana|nlp|gpu|COMPLETED|2026-11-24T10:00:00|2026-11-24T12:00:00|"
        "cpu=8,gres/gpu:a100=2,gres/gpu=2,node=1|gpu01",
    ]
)


def _import(tmp_path: Path, config: str) -> tuple[int, str, str]:
    (tmp_path / "gpu-kpi.toml").write_text(config)
    saved = tmp_path / "sacct.txt"
    saved.write_text(SACCT)
    p = gpu_kpi("import", "slurm", str(saved), "--config", str(tmp_path / "gpu-kpi.toml"))
    return p.returncode, p.stdout, p.stderr


def _job(tmp_path: Path) -> dict:
    p = gpu_kpi("job", "501", "--json", "--no-sacct", "--config", str(tmp_path / "gpu-kpi.toml"))
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.mark.parametrize(
    ("mapping", "model", "price"),
    [
        ("", "A100-40GB", 1.99),  # the table's reading of "a100"
        ('[slurm]\ngres_models = { a100 = "A100-80GB" }\n', "A100-80GB", 2.00),
    ],
)
def test_a_gres_type_is_the_model_the_site_says(
    tmp_path: Path, mapping: str, model: str, price: float
) -> None:
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    rc, _, err = _import(tmp_path, f'store = "{store}"\n{mapping}')
    assert rc == 0, err
    d = _job(tmp_path)
    # 2 GPUs for 2 h, nothing sampled: 4 GPU-h at the model's price, all not measured
    assert (d["gpu_model"], d["price_per_gpu_hour"]) == (model, price)
    assert d["no_samples_usd"] == pytest.approx(4 * price)


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ('[slurm]\ngres_models = { a100 = "Mystery-9" }\n', "slurm.gres_models.a100: 'Mystery-9'"),
        ('[slurm]\ngres_model = { a100 = "A100-80GB" }\n', "slurm.gres_model: unknown setting"),
        ("[slurm]\ngres_models = 3\n", "slurm.gres_models: expected a table"),
    ],
)
def test_a_bad_mapping_is_one_line(tmp_path: Path, config: str, message: str) -> None:
    rc, out, err = _import(tmp_path, f'store = "sqlite:///{tmp_path / "runs.db"}"\n{config}')
    assert rc == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    ("config", "noted"),
    [
        ("[owned.A100-80GB]\npurchase_usd = 15000\n{OWN}gpus = 4\n", True),
        (
            '[owned.A100-80GB]\npurchase_usd = 15000\n{OWN}[slurm]\ngres_models = { a100 = "A100-80GB" }\n',
            False,
        ),
        ("[owned.A100-40GB]\npurchase_usd = 9000\n{OWN}", False),  # owned as read
        ("[owned.H100]\npurchase_usd = 25000\n{OWN}", False),  # another family
    ],
)
def test_a_gres_type_read_as_a_card_the_site_does_not_own_is_named(
    tmp_path: Path, config: str, noted: bool
) -> None:
    # "a100" reads as the 40 GB card; a site that owns A100-80GB would pay for its jobs at the
    # rented 40 GB price and count its owned GPUs as nobody's: the import says how to fix it
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    own = "life_years = 5\npower_w = 400\nusd_per_kwh = 0.1\n"
    rc, out, err = _import(tmp_path, f'store = "{store}"\n' + config.replace("{OWN}", own))
    assert rc == 0, err
    line = (
        "gres type 'a100' read as A100-40GB, but [owned] has A100-80GB: if they are the same "
        'GPUs, add [slurm] gres_models = { "a100" = "A100-80GB" } to the config'
    )
    assert (line in out) is noted, out
    assert "imported 1 Slurm job(s)" in out

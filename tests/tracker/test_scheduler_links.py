"""A run's scheduler allocation from its environment: the Slurm job (as a real Slurm 22.05 job
sets it: ``tests/slurm-up.sh``, recorded in ``tests/data/slurm/job_env.txt``) and the
Kubernetes pod, into the run's links."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import Clock

from tracker import track
from tracker.scheduler import scheduler_links, slurm_job_of
from tracker.store import RunStore

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm"


def _env_of(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


def test_a_real_slurm_jobs_environment_names_its_cluster_and_job() -> None:
    env = _env_of(DATA / "job_env.txt")  # `env` inside `sbatch --gres=gpu:h100:2` (job 21)
    assert (env["SLURM_JOB_ID"], env["SLURM_CLUSTER_NAME"]) == ("21", "gpukpi")
    assert scheduler_links(env) == {"slurm": "gpukpi/21"}
    assert slurm_job_of("gpukpi/21") == ("gpukpi", "21")


@pytest.mark.parametrize(
    ("env", "links"),
    [
        ({"SLURM_JOB_ID": "1235", "SLURM_ARRAY_JOB_ID": "1234"}, {"slurm": "1235"}),
        ({"SLURM_JOB_ID": "12a"}, {}),  # no job id
        ({"SLURM_JOB_ID": "7", "SLURM_CLUSTER_NAME": "a/b"}, {"slurm": "7"}),
        (
            {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "train-0", "POD_NAMESPACE": "ml"},
            {"kubernetes": "ml/train-0"},
        ),
        (
            {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "POD_NAME": "job-x-1", "HOSTNAME": "h"},
            {"kubernetes": "from-file/job-x-1"},
        ),
        ({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "HOSTNAME": "Bad_Name"}, {}),
        ({"HOSTNAME": "train-0", "POD_NAMESPACE": "ml"}, {}),  # not in Kubernetes
    ],
)
def test_links_of_environments(env: dict[str, str], links: dict[str, str]) -> None:
    assert scheduler_links(env, read_namespace=lambda: "from-file") == links


def test_slurm_job_of_refuses_what_is_no_job() -> None:
    assert slurm_job_of("42") == ("", "42")
    assert slurm_job_of("gpukpi/x") is None and slurm_job_of("") is None


def test_a_tracked_run_records_its_job_and_the_users_links_win(
    monkeypatch: pytest.MonkeyPatch, store_url: str
) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "88")
    monkeypatch.setenv("SLURM_CLUSTER_NAME", "gpukpi")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    clock = Clock()
    kw = dict(backend="simulated:healthy@H100", store=store_url, clock=clock, threaded=False)
    with track(name="in-a-job", log_to_python=False, **kw) as run:  # type: ignore[arg-type]
        clock.t += 5
    assert run.record.links == {"slurm": "gpukpi/88"}
    with track(name="mine", links={"slurm": "other/1"}, log_to_python=False, **kw) as run:  # type: ignore[arg-type]
        clock.t += 5
    assert run.record.links == {"slurm": "other/1"}


def test_a_run_records_its_job_key_given_configured_or_slurms_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """track(job_key=) wins over GPU_KPI_JOB_KEY, which wins over SLURM_JOB_NAME; an
    interactive shell's job name is no key; the user's own job_key link wins over all."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    store = f"sqlite:///{tmp_path / 'runs.db'}"
    clock = Clock()
    kw = dict(backend="simulated:healthy@H100", store=store, clock=clock, threaded=False)

    def key(**more: object) -> str | None:
        with track(name="r", log_to_python=False, **kw, **more) as run:  # type: ignore[arg-type]
            clock.t += 5
        with RunStore(store) as s:  # as the store holds it, for the reports
            stored = s.get_run(run.id)
        assert stored is not None and stored.links == run.record.links
        return run.record.links.get("job_key")

    monkeypatch.setenv("SLURM_JOB_NAME", "resnet-nightly")
    assert key() == "resnet-nightly"
    monkeypatch.setenv("GPU_KPI_JOB_KEY", "nightly")
    assert key() == "nightly"
    assert key(job_key=" resnet\n nightly ") == "resnet nightly"  # one line
    assert key(job_key="a", links={"job_key": "mine"}) == "mine"
    monkeypatch.delenv("GPU_KPI_JOB_KEY")
    monkeypatch.setenv("SLURM_JOB_NAME", "bash")
    assert key() is None


def test_the_branch_a_ci_job_runs_on_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    from tracker.scheduler import GIT_BRANCH_LINK, git_branch_of

    assert git_branch_of({}) == ""
    assert git_branch_of({"GITHUB_REF_NAME": "main"}) == "main"
    # a pull request: its own branch, not the merge ref's name, and never main (a fork's main)
    pr = {
        "GITHUB_REF_NAME": "7/merge",
        "GITHUB_HEAD_REF": "main",
        "GITHUB_EVENT_NAME": "pull_request",
    }
    assert git_branch_of(pr) == "pull_request:main"
    mr = {"CI_COMMIT_REF_NAME": "main", "CI_MERGE_REQUEST_IID": "4"}
    assert git_branch_of(mr) == "merge_request:main"
    assert git_branch_of({"GIT_BRANCH": "origin/main"}) == "main"  # Jenkins
    assert git_branch_of({"CI_COMMIT_REF_NAME": "dev", "GPU_KPI_GIT_BRANCH": " mine "}) == "mine"
    monkeypatch.setenv("CI_COMMIT_REF_NAME", "release")
    with track(name="b", backend="simulated:healthy@H100", store=False, log_to_python=False) as run:
        pass
    assert run.record is not None and run.record.links[GIT_BRANCH_LINK] == "release"
    with track(
        name="b",
        backend="simulated:healthy@H100",
        store=False,
        log_to_python=False,
        links={GIT_BRANCH_LINK: "given"},
    ) as run:
        pass
    assert run.record is not None and run.record.links[GIT_BRANCH_LINK] == "given"

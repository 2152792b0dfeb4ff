"""The scheduler allocation a run runs in, from its environment: the Slurm job or the
Kubernetes pod, kept in the run's ``links`` so that the reports join the run to the
allocation by id (``gpu-kpi import slurm``), not by node and time.

- Slurm sets ``SLURM_JOB_ID`` (an array task's own id, the ``JobIDRaw`` of sacct) and
  ``SLURM_CLUSTER_NAME`` in every job: the link is ``slurm`` = ``CLUSTER/JOBID`` (``JOBID``
  alone where the cluster is not named).
- Kubernetes sets ``KUBERNETES_SERVICE_HOST`` in every container; the pod's name is
  ``POD_NAME`` where the pod spec passes it through the Downward API
  (``fieldRef: metadata.name``), else ``HOSTNAME`` (the pod's name unless the spec sets
  ``hostname``), its namespace ``POD_NAMESPACE``, else the service account's namespace file.
  The link is ``kubernetes`` = ``NAMESPACE/POD``.

Pure apart from the one file read, which the caller may replace; nothing runs at import.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path

SLURM_LINK = "slurm"
KUBERNETES_LINK = "kubernetes"
WORKLOAD_LINK = "kubernetes_workload"
"""``NAMESPACE/KIND/NAME`` of the workload (Job, JobSet, Deployment…) a run's pods belong to:
set by imports that know it (kube-state-metrics' owners), not by the tracker."""
NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
"""Where Kubernetes mounts the pod's namespace (with its service account token)."""

_SLURM_ID = re.compile(r"^\d+$")
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def _read_namespace() -> str:
    try:
        return Path(NAMESPACE_FILE).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return ""


def scheduler_links(
    environ: Mapping[str, str], *, read_namespace: Callable[[], str] = _read_namespace
) -> dict[str, str]:
    """The run's allocation as links: ``{"slurm": "CLUSTER/JOBID"}``,
    ``{"kubernetes": "NAMESPACE/POD"}``, or none.

    Args:
        environ: The process's environment (``os.environ``).
        read_namespace: The pod's namespace from the service account's file; "" when there is
            none (called only in a Kubernetes container without ``POD_NAMESPACE``).

    Returns:
        The links; a value that is not an id of its kind (a ``SLURM_JOB_ID`` that is not a
        number, a pod name that Kubernetes would refuse) is left out.
    """
    links: dict[str, str] = {}
    job = environ.get("SLURM_JOB_ID", "").strip()
    if _SLURM_ID.match(job):
        cluster = environ.get("SLURM_CLUSTER_NAME", "").strip()
        links[SLURM_LINK] = f"{cluster}/{job}" if cluster and "/" not in cluster else job
    if environ.get("KUBERNETES_SERVICE_HOST", "").strip():
        pod = (environ.get("POD_NAME") or environ.get("HOSTNAME") or "").strip()
        namespace = (environ.get("POD_NAMESPACE") or "").strip() or read_namespace()
        if _K8S_NAME.match(pod) and _K8S_NAME.match(namespace):
            links[KUBERNETES_LINK] = f"{namespace}/{pod}"
    return links


def slurm_job_of(link: str) -> tuple[str, str] | None:
    """``(cluster, job id)`` of a ``slurm`` link (cluster ``""`` where it names none); None for
    a value that is not one.

    Args:
        link: The link's value, ``CLUSTER/JOBID`` or ``JOBID``.
    """
    cluster, _, job = link.strip().rpartition("/")
    return (cluster, job) if _SLURM_ID.match(job) else None


_SHELL_JOB_NAMES = frozenset(
    {
        *("bash", "sh", "zsh", "fish", "interactive", "srun", "salloc", "sbatch", "jupyter"),
        *("wrap", "python", "python3", "run.sh", "job.sh", "script", "script.sh"),
    }
)
"""Slurm job names that name no work (an interactive shell's, ``sbatch --wrap``'s, a bare
interpreter or a generic script): no job key of theirs."""
JOB_KEY_MAX = 200


GIT_BRANCH_LINK = "git_branch"
"""The branch a run's code was on, as its CI says (:func:`git_branch_of`): ``gpu-kpi gate``
takes its baseline from the runs of the main branch."""
_BRANCH_VARS = (
    "GPU_KPI_GIT_BRANCH",  # the user's own
    "GITHUB_HEAD_REF",  # GitHub Actions, a pull request's branch
    "GITHUB_REF_NAME",  # GitHub Actions, a push's branch (or tag)
    "CI_COMMIT_REF_NAME",  # GitLab CI
    "BUILDKITE_BRANCH",
    "CIRCLE_BRANCH",
    "BITBUCKET_BRANCH",
    "GIT_BRANCH",  # Jenkins' git plugin: origin/main
)


def git_branch_of(environ: Mapping[str, str]) -> str:
    """The branch a CI job runs on, from the variables CI systems set (``GPU_KPI_GIT_BRANCH``
    first; Jenkins' ``origin/`` dropped); a pull request's as ``pull_request:BRANCH`` (GitHub)
    or ``merge_request:BRANCH`` (GitLab), so that a fork's ``main`` is not ``main``; "" outside
    CI. No ``git`` is run.

    Args:
        environ: The process's environment.
    """
    for var in _BRANCH_VARS:
        value = " ".join(environ.get(var, "").split())
        if not value:
            continue
        value = value.removeprefix("origin/")
        if var == "GITHUB_HEAD_REF" and environ.get("GITHUB_EVENT_NAME", "pull_request").startswith(
            "pull_request"
        ):
            value = f"pull_request:{value}"  # a fork's main is not main
        elif var == "CI_COMMIT_REF_NAME" and environ.get("CI_MERGE_REQUEST_IID"):
            source = environ.get("CI_MERGE_REQUEST_SOURCE_BRANCH_NAME", "").strip() or value
            value = f"merge_request:{source}"
        return value[:JOB_KEY_MAX]
    return ""


def job_key_of(given: str | None, configured: str | None, environ: Mapping[str, str]) -> str:
    """The run's recurring job (:attr:`tracker.record.RunSpec.job_key`): the one given to
    ``track()``, else the config's (``[tracker] job_key``, ``GPU_KPI_JOB_KEY``), else Slurm's
    job name (``SLURM_JOB_NAME``, not an interactive shell's); "" for none (the reports derive
    one from the run's name). One line, at most 200 characters.

    Args:
        given: ``track(job_key=…)``.
        configured: The settings' ``job_key``.
        environ: The process's environment.
    """
    slurm = environ.get("SLURM_JOB_NAME", "").strip()
    for key in (given, configured, "" if slurm.lower() in _SHELL_JOB_NAMES else slurm):
        if isinstance(key, str) and (one := " ".join(key.split())):
            return one[:JOB_KEY_MAX]
    return ""

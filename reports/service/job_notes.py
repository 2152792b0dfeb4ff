"""``gpu-kpi job JOBID``: one Slurm job's efficiency note (:mod:`reports.jobs`) printed, and with
``--mail`` sent to its user once, through the delivery log, when its recoverable waste plus
its GPU-time not measured (dollars no figure shows useful) is at least ``--min-waste-usd``:
what a Slurm epilog calls as each job ends (``contrib/slurm/epilog.sh``).

A job not imported yet, or running when last imported, is asked of this machine's ``sacct``
first (``-j JOBID``) and imported: an epilog runs as the job ends, before any scheduled import.
The delivery log's kind is ``job:<cluster>/<job id>`` and its week the week the job started, so
a second epilog, a rerun or a requeue's second end sends nothing twice.

``--to '{user}@example.org'`` puts the job's user where ``{user}`` is, and only a user that is a
plain local part (:data:`LOCAL_PART`): the user comes from the scheduler's record, and a user
``victim@evil.example, root`` would otherwise mail outside the domain. The address made must
then be one address, at the template's domain. A refused user is an error (exit 2, one line
naming the job and the user): the epilog logs that line and exits 0 whatever gpu-kpi says, so
the job is never failed for it.
"""

from __future__ import annotations

import argparse
import dataclasses
import html
import json
import re
import shutil
import sys
from collections.abc import Callable, Mapping
from datetime import datetime
from email.message import EmailMessage
from typing import Any

from reports.errors import ReportError, UsageError

_JOB_ID = re.compile(r"^\d+([_+]\d+)?$")
_POD = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
"""A pod as ``gpu-kpi import kubernetes`` names it, ``NAMESPACE/POD``."""
MIN_WASTE_USD = 5.0
_ATEXT = "A-Za-z0-9#$&'*+/=?^_`{|}~-"
LOCAL_PART = re.compile(f"[{_ATEXT}]+(?:\\.[{_ATEXT}]+)*")
"""What ``{user}`` may be: RFC 5321's dot-atom local part (letters, digits, these signs, and dots
not at either end or doubled), up to :data:`MAX_LOCAL_PART` characters, less ``%`` and ``!``:
routes through the domain's own mail server (Postfix's percent hack takes ``a%evil.example@corp``
to ``a@evil.example``; ``evil.example!a`` is a UUCP path); useradd's default rule allows neither."""
MAX_LOCAL_PART = 64

AddCommand = Callable[..., argparse.ArgumentParser]


def add_job_command(add: AddCommand) -> None:
    """``gpu-kpi job`` on the CLI's parser (``add``: its subcommand helper)."""
    job = add(
        "job",
        cmd_job,
        "one Slurm job's (or Kubernetes pod's) GPU efficiency, as seff says it, with its cost "
        "and waste; --mail "
        "sends it to the job's user once (a Slurm epilog's call)",
    )
    job.add_argument(
        "job_id", metavar="JOBID", help="1234, 1234_7 (array task), 1234+0, or a pod: NAMESPACE/POD"
    )
    job.add_argument("--cluster", metavar="NAME", help="the job's cluster (when ids repeat)")
    job.add_argument("--tz", help="time zone of the times shown (default: [report] timezone)")
    job.add_argument("--basis", choices=("util", "sm_active"), help="utilization basis")
    job.add_argument("--json", action="store_true", help="the note as JSON")
    job.add_argument(
        "--no-sacct",
        action="store_true",
        help="do not ask sacct for a job that is not imported yet",
    )
    job.add_argument(
        "--mail",
        action="store_true",
        help="mail the note (once per job and address, through the delivery log; [smtp] "
        "settings) when its recoverable waste plus its GPU-time not measured is at least "
        "--min-waste-usd",
    )
    job.add_argument(
        "--to",
        metavar="ADDR",
        help="--mail: the address; {user} stands for the job's user ({user}@example.org)",
    )
    job.add_argument(
        "--min-waste-usd",
        type=float,
        metavar="USD",
        help=f"--mail: send only from this recoverable waste (default {MIN_WASTE_USD:g})",
    )


def cmd_job(args: argparse.Namespace) -> int:
    """``gpu-kpi job JOBID``: print the note; with ``--mail``, send it once."""
    from reports.service.commands import _service_settings
    from reports.service.job import Service
    from reports.weeks import zone

    job_id = args.job_id.strip()
    cluster, slash, bare = job_id.rpartition("/")
    named = bool(slash and cluster and _JOB_ID.match(bare))  # CLUSTER/JOBID, as reports show it
    pod = _POD.match(job_id) is not None
    if not (_JOB_ID.match(job_id) or named or pod):
        raise UsageError(
            f"JOBID {args.job_id!r}: a Slurm job id (1234, 1234_7, 1234+0, or CLUSTER/1234 as "
            "the report shows it) or a Kubernetes pod, NAMESPACE/POD"
        )
    if named:
        if args.cluster is not None and args.cluster != cluster:
            raise UsageError(
                f"JOBID {job_id!r} names cluster {cluster!r}; --cluster says {args.cluster!r}"
            )
        with_pod = job_id if pod else None  # demo/7006 may also be a pod of namespace demo
        job_id, pod = bare, False
        args.cluster = cluster
    else:
        with_pod = None
    if not args.mail and (args.to or args.min_waste_usd is not None):
        raise UsageError("--to and --min-waste-usd are for --mail")
    if args.mail and not args.to:
        raise UsageError("--mail needs --to ADDR ({user}@example.org: the job's user)")
    if args.mail:
        to_domain(args.to)
    minimum = MIN_WASTE_USD if args.min_waste_usd is None else args.min_waste_usd
    if not 0 <= minimum < 1e9:
        raise UsageError(f"--min-waste-usd {minimum:g}: from 0")
    if args.tz:
        zone(args.tz)
    service = Service(_service_settings(args))
    req = service.request(None)
    tz = zone(args.tz) if args.tz else req.tz
    req = dataclasses.replace(req, tz=tz, basis=args.basis or req.basis)
    from reports.jobs import find_job, job_note, note_dict, note_text
    from tracker.store import RunStore

    now = args.now
    with RunStore(service.settings.tracker.store) as store:
        found = find_job(store, job_id, args.cluster)
        if not found and with_pod is not None and find_job(store, with_pod, None):
            job_id, pod, found = with_pod, True, find_job(store, with_pod, None)
        running = len(found) == 1 and found[0].end_at is None  # as far as its import knew
        if (not found or running) and not pod and not args.no_sacct and shutil.which("sacct"):
            _import_from_sacct(
                store,
                job_id,
                cluster=args.cluster or "",
                now=now,
                gres_models=service.settings.tracker.gres_models,
            )
            found = find_job(store, job_id, args.cluster)
        if not found:
            raise ReportError(
                f"pod {job_id} is not in the store: import it (gpu-kpi import kubernetes URL "
                "--since … --until …)"
                if pod
                else f"job {job_id} is not in the store: import it (gpu-kpi import slurm) on a "
                "machine with sacct, or run this there"
            )
        if len(found) > 1:
            clusters = ", ".join(sorted({a.cluster or '""' for a in found}))
            raise UsageError(
                f"job {job_id} is in {len(found)} clusters ({clusters}): give --cluster"
            )
        note = job_note(store, found[0], req)
    if args.json:
        print(json.dumps(note_dict(note), indent=2, allow_nan=False))
    else:
        print(note_text(note, tz), end="")
    if not args.mail:
        return 0
    sys.stdout.flush()  # the note before what became of it: the epilog logs the last line
    return _mail(service, args, note, minimum, now=now, text=note_text(note, tz))


def _import_from_sacct(
    store: Any, job_id: str, *, cluster: str, now: datetime, gres_models: Mapping[str, str]
) -> None:
    """The job from this machine's sacct into the store (an epilog's job, not imported yet),
    its gres type read through ``[slurm] gres_models``."""
    from reports.data.allocations import write_allocations
    from reports.imports.slurm_jobs import sacct_job

    done = sacct_job(job_id, cluster=cluster, now=now, gres_models=gres_models)
    write_allocations(store, done.jobs, settle=True)


def _mail(
    service: Any, args: argparse.Namespace, note: Any, minimum: float, *, now: datetime, text: str
) -> int:
    from reports.jobs import JobNote
    from reports.render.fmt import fmt_usd
    from reports.service.config import Recipient, parse_address
    from reports.service.deliveries import DeliveryLog, deliver
    from reports.service.mailer import config_fingerprint
    from tracker.store import RunStore

    assert isinstance(note, JobNote)
    j = note.line
    stake = note.at_stake_usd  # waste, not measured, failed work and the machine's alike
    if stake is None or stake < minimum:
        if stake is None:
            what = "recoverable waste unknown (no price for its GPU type)"
        else:
            failed = f" + failed work {fmt_usd(note.failed_usd or 0.0)}" if note.failed else ""
            if note.throttled_usd:
                failed += f" + throttled {fmt_usd(note.throttled_usd)}"
            what = (
                f"recoverable waste {fmt_usd(note.waste_usd or 0.0)} + not measured "
                f"{fmt_usd(note.unmeasured_usd or 0.0)}{failed} = {fmt_usd(stake)}"
            )
        print(f"not mailed: {what}, under --min-waste-usd {fmt_usd(minimum)}")
        return 0
    try:
        address = address_of(args.to, j.user)
    except ValueError as e:
        raise ReportError(f"the note of job {j.shown_id} not mailed: {e}") from None
    try:
        parse_address(address)
    except ValueError as e:
        raise UsageError(f"--to {address!r}: {e}") from None
    smtp = service.settings.smtp
    mailer, errors = service._open_mailer()
    if mailer is None:
        raise ReportError(errors[0])
    kind = f"job:{j.cluster}/{j.job_id}"
    week = f"{j.start.astimezone(service.settings.tz):%G-W%V}"
    with RunStore(service.settings.tracker.store) as store:
        outcome = deliver(
            DeliveryLog(store),
            kind,
            week,
            Recipient(to=address, report="job"),
            lambda: job_email(note, text, sender=smtp.sender, to=address, now=now),
            what=f"the note of job {j.shown_id}",
            mailer=mailer,
            owner=service.owner,
            now=now,
            smtp_config=config_fingerprint(smtp),
        )
    if outcome.status == "skipped":
        print(f"not mailed: the note of job {j.shown_id} went to {address} before")
        return 0
    if outcome.status != "sent":
        raise ReportError(
            f"the note of job {j.shown_id} to {address}: {outcome.status}: {outcome.error}"
        )
    print(f"mailed the note of job {j.shown_id} to {address}")
    return 0


def _addr_specs(text: str) -> list[tuple[str, str]]:
    """The (local part, domain) of each address of the header value ``text``; ValueError where
    the parser had to guess."""
    from email import policy

    try:
        header = policy.default.header_factory("To", text)
        addresses = header.addresses
    except Exception as e:  # the parser's IndexError, HeaderParseError… on what it did not expect
        raise ValueError(f"not an address list: {text!r}") from e
    if header.defects:
        raise ValueError(f"not an address list: {text!r}")
    return [(a.username, a.domain) for a in addresses]


def to_domain(template: str) -> str | None:
    """The domain of the ``--to`` template's ``{user}`` address (None without ``{user}``).

    Raises:
        UsageError: ``{user}@…`` does not make one address.
    """
    if "{user}" not in template:
        return None
    try:
        specs = _addr_specs(template.replace("{user}", "user"))
    except ValueError:
        specs = []
    if len(specs) != 1 or not specs[0][1]:
        raise UsageError(
            f"--to {template!r}: {{user}} must make one address, as in {{user}}@example.org"
        )
    return specs[0][1]


def address_of(template: str, user: str) -> str:
    """The ``--to`` template with the job's ``user`` for ``{user}``.

    Args:
        template: ``--to``: an address, with ``{user}`` where the job's user goes.
        user: The job's user, as the scheduler recorded it.

    Returns:
        The address.

    Raises:
        ValueError: ``user`` is not a plain local part (:data:`LOCAL_PART`, at most
            :data:`MAX_LOCAL_PART` characters), or the address made is not one address at the
            template's domain; the message names the user or the address.
    """
    from tracker.text import one_line

    domain = to_domain(template)
    if domain is None:
        return template
    if len(user) > MAX_LOCAL_PART or not LOCAL_PART.fullmatch(user):
        raise ValueError(
            f"its user {one_line(repr(user), 100)} is not a plain mail local part ({{user}} in "
            "--to)"
        )
    address = template.replace("{user}", user)
    specs = _addr_specs(address)
    if len(specs) != 1 or specs[0][1].lower() != domain.lower():
        raise ValueError(f"{one_line(repr(address), 140)} is not one address at {domain}")
    return address


def job_email(note: Any, text: str, *, sender: str, to: str, now: datetime) -> EmailMessage:
    """The note as an email: the text, and the same text in an HTML ``<pre>`` (escaped)."""
    from reports.render.email import _alternative, _domain
    from reports.render.fmt import fmt_usd
    from tracker.text import one_line

    j = note.line
    what = []
    if note.waste_usd is not None:
        what.append(f"{fmt_usd(note.waste_usd)} recoverable")
    if (note.unmeasured_usd or 0.0) >= 0.005:
        what.append(f"{fmt_usd(note.unmeasured_usd)} not measured")
    if (note.failed_usd or 0.0) >= 0.005:
        what.append(f"{fmt_usd(note.failed_usd)} failed work")
    if (note.throttled_usd or 0.0) >= 0.005:
        what.append(f"{fmt_usd(note.throttled_usd)} the machine's")
    subject = f"GPU efficiency of job {one_line(j.shown_id, 40)} ({one_line(j.name, 60)}): " + (
        ", ".join(what) or f"{fmt_usd(note.waste_usd)} recoverable"
    )
    body = (
        '<!DOCTYPE html><html><body><pre style="font: 13px ui-monospace, Menlo, Consolas, '
        f'monospace">{html.escape(text)}</pre></body></html>'
    )
    return _alternative(
        text,
        body,
        subject=subject,
        sender=sender,
        recipients=[to],
        date=now,
        domain=_domain(sender),
    )

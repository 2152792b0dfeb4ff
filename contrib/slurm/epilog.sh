#!/bin/sh
# Slurm epilog: mail a job's user its GPU efficiency note (gpu-kpi job), once per job, when the
# job's recoverable GPU waste is at least GPU_KPI_MIN_WASTE_USD dollars (default 5).
#
#   slurm.conf:  EpilogSlurmctld=/etc/slurm/gpu-kpi-epilog.sh   (the controller: sacct is there)
#           or:  Epilog=/etc/slurm/gpu-kpi-epilog.sh            (each node; needs sacct there)
#
# It reads the job from sacct (gpu-kpi job imports it), matches it to the samples in the run
# store, and mails through the [smtp] settings of GPU_KPI_CONFIG; the delivery log in the store
# makes a second call for the same job (a requeue, a rerun) send nothing. It never fails the
# job or drains the node: whatever happens, it exits 0 (gpu-kpi's own message goes to syslog).
#
# Settings (in the environment slurmd/slurmctld gives the epilog, or set here):
#   GPU_KPI               the command (default: gpu-kpi on PATH)
#   GPU_KPI_CONFIG        the config file: [store] url, [smtp] (password from its file or env)
#   GPU_KPI_MAIL_DOMAIN   the users' mail domain: USER@DOMAIN (default: the host's domain)
#   GPU_KPI_MIN_WASTE_USD mail only from this much recoverable waste (default 5)
#   GPU_KPI_TIMEOUT_S     give up after this many seconds (default 60)
#   GPU_KPI_EPILOG_LOG    also append gpu-kpi's last line to this file

GPU_KPI=${GPU_KPI:-gpu-kpi}
DOMAIN=${GPU_KPI_MAIL_DOMAIN:-$(hostname -d 2>/dev/null)}
MIN=${GPU_KPI_MIN_WASTE_USD:-5}
LIMIT=${GPU_KPI_TIMEOUT_S:-60}

case "$SLURM_JOB_ID" in
    ''|*[!0-9]*) exit 0 ;;  # not a job's epilog
esac
[ -n "$DOMAIN" ] || { logger -t gpu-kpi "epilog: set GPU_KPI_MAIL_DOMAIN" 2>/dev/null; exit 0; }

out=$(timeout "$LIMIT" $GPU_KPI job "$SLURM_JOB_ID" ${SLURM_CLUSTER_NAME:+--cluster "$SLURM_CLUSTER_NAME"} \
    --mail --to "{user}@$DOMAIN" --min-waste-usd "$MIN" 2>&1 | tail -n 1)
logger -t gpu-kpi "epilog job $SLURM_JOB_ID: $out" 2>/dev/null
[ -z "$GPU_KPI_EPILOG_LOG" ] || echo "$(date -u +%FT%TZ) job $SLURM_JOB_ID: $out" >>"$GPU_KPI_EPILOG_LOG" 2>/dev/null
exit 0

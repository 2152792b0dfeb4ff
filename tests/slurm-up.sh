#!/usr/bin/env bash
# A real single-node Slurm with accounting for the tests of `gpu-kpi import slurm`: munge, a
# private MariaDB on 127.0.0.1:3306, slurmdbd, slurmctld and slurmd (Debian's slurm-wlm 22.05),
# one node with 4 GPUs declared as GRES (device files of our own: 22.05 drops a GPU without
# one; nothing opens them), accounts nlp and vision. Every daemon started by hand (no systemd);
# state under $GPU_KPI_SLURM_DIR (default /tmp/gpu-kpi-slurm); the configs in /etc/slurm.
# Idempotent: returns at once when the node already answers. Where the packages are missing and
# this runs as root with apt-get, installs them (~15 s); otherwise says so and exits 0: the
# Slurm tests then skip (fail in CI). Brought up from nothing in ~7 s.
set -euo pipefail

R=${GPU_KPI_SLURM_DIR:-/tmp/gpu-kpi-slurm}
S=$R/state
CLUSTER=gpukpi
DBPASS=gpu-kpi-test-only  # the test MariaDB's, on 127.0.0.1 only

# up already: the node answers and accounting reaches its database (a MariaDB that died
# leaves slurmctld up and every sacct failing)
if command -v sinfo >/dev/null 2>&1 && [ -s "$S/run/slurmd.pid" ] && kill -0 "$(cat "$S/run/slurmd.pid")" 2>/dev/null \
    && grep -q '^EpilogSlurmctld=' /etc/slurm/slurm.conf 2>/dev/null \
    && timeout 5 sinfo -h -N -o '%T' 2>/dev/null | grep -Eq '^(idle|mixed|allocated)' \
    && timeout 5 sacct -a -X -n -S now-1minutes -o JobID >/dev/null 2>&1; then
    exit 0
fi
PACKAGES="slurm-wlm slurmdbd mariadb-server munge"
if ! command -v slurmctld >/dev/null 2>&1 || ! command -v slurmdbd >/dev/null 2>&1 \
    || ! command -v mariadbd >/dev/null 2>&1 || ! command -v munged >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "slurm-up: installing $PACKAGES from Debian's packages"
        # shellcheck disable=SC2086
        if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $PACKAGES >/dev/null 2>&1; then
            apt-get update -qq
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $PACKAGES >/dev/null
        fi
    else
        echo "slurm-up: Slurm is not installed (Debian: apt-get install $PACKAGES);" \
             "the Slurm tests will be skipped"
        exit 0
    fi
fi
# never over a real cluster's configuration: /etc/slurm/*.conf are written only when absent
# or written by this script (its marker on the first line)
MARKER="# written by gpu-kpi tests/slurm-up.sh for its tests"
for conf in /etc/slurm/slurm.conf /etc/slurm/slurmdbd.conf /etc/slurm/gres.conf; do
    if [ -e "$conf" ] && [ "$(head -n 1 "$conf")" != "$MARKER" ]; then
        echo "slurm-up: $conf is not ours (a real cluster's?): leaving Slurm alone;" \
             "the Slurm tests will be skipped"
        exit 0
    fi
done
HOST=$(hostname -s)
# sockets and cores as slurmd sees them (a mismatch leaves the node INVAL)
TOPO=$(slurmd -C | head -1 | grep -oE 'CPUs=[0-9]+ Boards=[0-9]+ SocketsPerBoard=[0-9]+ CoresPerSocket=[0-9]+ ThreadsPerCore=[0-9]+')
SECONDS=0

log() { printf 'slurm-up: %ss %s\n' "$SECONDS" "$*"; }
wait_for() {  # wait_for <seconds> <description> <command...>
    local t=$1 what=$2; shift 2
    for _ in $(seq "$t"); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
    echo "timeout waiting for $what" >&2; return 1
}
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

mkdir -p "$S"/{log,run,ctld,slurmd,mysql}
chmod 755 "$R" "$S" "$S/run"

# ---------------------------------------------------------------- munge
install -d -o munge -g munge -m 700 /etc/munge /var/log/munge
install -d -o munge -g munge -m 711 /var/lib/munge
install -d -o munge -g munge -m 755 /run/munge
if [ ! -s /etc/munge/munge.key ]; then
    log "creating munge key"
    runuser -u munge -- mungekey --create --keyfile=/etc/munge/munge.key
fi
if ! alive /run/munge/munged.pid; then
    log "starting munged"
    runuser -u munge -- /usr/sbin/munged      # forks; pid in /run/munge/munged.pid
fi
wait_for 10 munged sh -c 'munge -n | unmunge'

# ---------------------------------------------------------------- MariaDB
# Private instance: datadir/socket under $S, TCP only on 127.0.0.1:3306,
# --no-defaults so /etc/mysql/* (socket in /run/mysqld) is not used.
# mariadbd runs as user mysql: socket, pid and log go in a mysql-owned dir.
M=$S/mysql-run
install -d -o mysql -g mysql -m 755 "$M"
MYSOCK=$M/mysqld.sock
if [ ! -d "$S/mysql/mysql" ]; then
    log "initialising MariaDB datadir"
    chown mysql:mysql "$S/mysql"
    mariadb-install-db --no-defaults --user=mysql --datadir="$S/mysql" \
        --skip-test-db --auth-root-authentication-method=socket \
        >"$S/log/mariadb-install.log" 2>&1
fi
if ! alive "$M/mysqld.pid"; then
    log "starting mariadbd"
    nohup /usr/sbin/mariadbd --no-defaults --user=mysql \
        --datadir="$S/mysql" --socket="$MYSOCK" --pid-file="$M/mysqld.pid" \
        --bind-address=127.0.0.1 --port=3306 --log-error="$M/mariadb.log" \
        --innodb-buffer-pool-size=128M --innodb-log-file-size=64M \
        --innodb-lock-wait-timeout=900 --max-allowed-packet=16M \
        </dev/null >/dev/null 2>&1 &
fi
wait_for 60 mariadbd mariadb-admin --no-defaults --socket="$MYSOCK" -uroot ping
mariadb --no-defaults --socket="$MYSOCK" -uroot <<SQL
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DBPASS';
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$DBPASS';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
FLUSH PRIVILEGES;
SQL

# ---------------------------------------------------------------- configs
log "writing /etc/slurm/{slurm.conf,gres.conf,slurmdbd.conf}"
mkdir -p /etc/slurm
BEFORE=$(md5sum </etc/slurm/slurm.conf 2>/dev/null || true)
# the controller's epilog: contrib/slurm/epilog.sh, only while a test asks for it (its settings
# in $R/epilog.env, which the test writes and removes); otherwise it does nothing
cat >"$R/epilog-ctld.sh" <<'EPILOG'
#!/bin/sh
ENV=${0%/*}/epilog.env
[ -r "$ENV" ] || exit 0
. "$ENV"
exec sh "$GPU_KPI_EPILOG"
EPILOG
chmod 755 "$R/epilog-ctld.sh"
cat >/etc/slurm/slurmdbd.conf <<EOF
$MARKER
AuthType=auth/munge
DbdHost=localhost
DbdPort=6819
SlurmUser=root
LogFile=$S/log/slurmdbd.log
PidFile=$S/run/slurmdbd.pid
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3306
StorageUser=slurm
StoragePass=$DBPASS
StorageLoc=slurm_acct_db
EOF
chown root:root /etc/slurm/slurmdbd.conf
chmod 600 /etc/slurm/slurmdbd.conf

cat >/etc/slurm/slurm.conf <<EOF
$MARKER
ClusterName=$CLUSTER
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
MpiDefault=none
SwitchType=switch/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
StateSaveLocation=$S/ctld
SlurmdSpoolDir=$S/slurmd
SlurmctldPidFile=$S/run/slurmctld.pid
SlurmdPidFile=$S/run/slurmd.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=500
GresTypes=gpu
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
AccountingStorageTRES=gres/gpu,gres/gpu:h100
AccountingStorageEnforce=associations
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=10
JobCompType=jobcomp/none
# creates the <id>.extern step seen on most production clusters (works with linuxproc;
# slurmctld logs a harmless "PrologFlags=Contain ... proctrack/cgroup" note)
PrologFlags=Contain
EpilogSlurmctld=$R/epilog-ctld.sh
NodeName=$HOST NodeAddr=127.0.0.1 $TOPO RealMemory=8000 Gres=gpu:h100:4 State=UNKNOWN
PartitionName=gpu Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
EOF

# gres/gpu silently drops GPUs that have no File= ("Removing file-less GPU
# gpu:h100 from final GRES list" -> node INVAL "gres/gpu count reported lower
# than configured (0 < 4)"), and Flags=CountOnly does not help. So point File=
# at 4 fake char device nodes with NVIDIA's major number (195, minors 0-3).
# No driver exists, nothing opens them; Slurm uses the trailing index for
# CUDA_VISIBLE_DEVICES. (Do NOT clone /dev/null here: with task/cgroup +
# ConstrainDevices=yes, unallocated "GPUs" = c 1:3 get denied and jobs fail
# with "Could not open stdin file /dev/null: Operation not permitted".)
mkdir -p "$S/dev"
for i in 0 1 2 3; do
    [ -e "$S/dev/nvidia$i" ] || mknod -m 666 "$S/dev/nvidia$i" c 195 "$i"
done
cat >/etc/slurm/gres.conf <<EOF
$MARKER
AutoDetect=off
NodeName=$HOST Name=gpu Type=h100 File=$S/dev/nvidia[0-3]
EOF

# ---------------------------------------------------------------- slurmdbd
if ! alive "$S/run/slurmdbd.pid"; then
    log "starting slurmdbd"
    /usr/sbin/slurmdbd                       # forks; logs to $S/log/slurmdbd.log
fi
wait_for 60 slurmdbd sacctmgr -n show cluster

# cluster + accounts + user (slurmctld must find its cluster registered)
log "registering cluster/accounts/users"
sacctmgr -n -P show cluster format=cluster | grep -qx "$CLUSTER" ||
    sacctmgr -i add cluster "$CLUSTER" >/dev/null
sacctmgr -i add account nlp,vision Cluster="$CLUSTER" \
    Description=research Organization=gpukpi >/dev/null || true
sacctmgr -i add user root Account=nlp,vision DefaultAccount=nlp >/dev/null || true
sacctmgr -i add user nobody Account=vision DefaultAccount=vision >/dev/null || true

# ---------------------------------------------------------------- slurmctld / slurmd
if alive "$S/run/slurmctld.pid" && [ "$BEFORE" != "$(md5sum </etc/slurm/slurm.conf)" ]; then
    # a restart, not `scontrol reconfigure`: 22.05 takes a new EpilogSlurmctld only at start
    log "slurm.conf changed: restarting slurmctld"
    kill "$(cat "$S/run/slurmctld.pid")"
    for _ in $(seq 30); do alive "$S/run/slurmctld.pid" || break; sleep 1; done
fi
if ! alive "$S/run/slurmctld.pid"; then
    log "starting slurmctld"
    /usr/sbin/slurmctld 2>>"$S/log/slurmctld.start"  # a note on PrologFlags=Contain: harmless
fi
wait_for 30 slurmctld scontrol ping
if ! alive "$S/run/slurmd.pid"; then
    log "starting slurmd"
    /usr/sbin/slurmd
fi
node_ready() { sinfo -h -N -n "$HOST" -o '%T' | grep -Eq '^(idle|mixed|allocated)'; }
wait_for 30 "node $HOST idle" node_ready || {
    scontrol update NodeName="$HOST" State=RESUME || true
    wait_for 15 "node $HOST idle" node_ready
}
log "up: $(sinfo -h -N -o '%N %T %G %c %m')"

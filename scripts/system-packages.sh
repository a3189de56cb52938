#!/usr/bin/env bash
# System packages that some tests need, checked (and, as root with apt-get, installed) up front
# by scripts/test.sh, so that no test installs anything:
#   tmux: tests/tui/test_tmux_e2e.py drives the wizard in a real terminal
#   the linter of shell scripts: tests/launch/test_cluster_files.py lints the generated scripts
#   libaio-dev: DeepSpeed's async_io op (the NVMe-offload tests)
#   slurm-wlm, munge: tests/launch/test_slurm.py runs a two-node Slurm cluster on this host
# Not root, no apt-get, or TUNER_NO_APT=1: nothing is installed; one line names what is
# missing and the command to run, and those tests skip saying the same.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/sbin/$1" ]; }
missing=()
why=()
have tmux || { missing+=(tmux); why+=("tmux: the terminal test"); }
have shellcheck || { missing+=(shellcheck); why+=("shellcheck: the launch-script lint"); }
[ -e /usr/include/libaio.h ] || { missing+=(libaio-dev); why+=("libaio-dev: DeepSpeed's NVMe-offload op"); }
{ have slurmctld && have slurmd && have sbatch; } || { missing+=(slurm-wlm); why+=("slurm-wlm: the Slurm test"); }
have munged || { missing+=(munge); why+=("munge: the Slurm test"); }
[ ${#missing[@]} -eq 0 ] && exit 0

reasons=$(IFS=';'; echo "${why[*]}")
reasons=${reasons//;/, }
if [ "$(id -u)" = 0 ] && have apt-get && [ -z "${TUNER_NO_APT:-}" ]; then
    mkdir -p .venv
    echo "installing system packages some tests need: ${missing[*]} ($reasons) with apt-get (log: .venv/apt.log)"
    if ! { timeout 600 apt-get -q -o DPkg::Lock::Timeout=120 update \
           && DEBIAN_FRONTEND=noninteractive timeout 900 apt-get -q -y -o DPkg::Lock::Timeout=120 install "${missing[@]}"; \
         } >>.venv/apt.log 2>&1; then
        echo "apt-get could not install them (last lines of .venv/apt.log below); the tests that need them will skip"
        tail -5 .venv/apt.log
    fi
else
    echo "not installed: ${missing[*]} ($reasons); those tests will skip. To run them: sudo apt-get install -y ${missing[*]}"
fi
exit 0

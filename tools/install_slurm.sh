#!/usr/bin/env bash
# Install Debian's SLURM and munge for the test suite's private cluster (tests/slurm), as root,
# without starting or enabling them: the tests start their own daemons, with their own config and
# key, and stop them. Run by `make test` where CI=true or with SLURM=1; never on its own initiative.
set -euo pipefail
PACKAGES=(slurmctld slurmd slurm-client munge)
UNITS=(munge.service slurmd.service slurmctld.service)

if [ "$(id -u)" != 0 ]; then
  echo "install_slurm.sh installs system packages: run it as root (make uses sudo where it can)" >&2
  exit 1
fi
command -v apt-get >/dev/null || { echo "install_slurm.sh needs apt-get (Debian or Ubuntu)" >&2; exit 1; }

# Package scripts start a service unless policy-rc.d says no (exit 101): say no while installing
POLICY=/usr/sbin/policy-rc.d
if [ ! -e "$POLICY" ]; then
  printf '#!/bin/sh\nexit 101\n' > "$POLICY" && chmod 755 "$POLICY"
  trap 'rm -f "$POLICY"' EXIT
fi
LOG=$(mktemp)
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
       "${PACKAGES[@]}"; } >"$LOG" 2>&1; then
  cat "$LOG" >&2; rm -f "$LOG"; exit 1
fi
rm -f "$LOG"
# ... and they enable their systemd units and init scripts (even where systemd does not run): undo that
for unit in "${UNITS[@]}"; do
  if command -v systemctl >/dev/null; then systemctl disable --quiet "$unit" >/dev/null 2>&1 || true
  elif command -v update-rc.d >/dev/null; then update-rc.d "${unit%.service}" disable >/dev/null 2>&1 || true; fi
done
echo "installed ${PACKAGES[*]} (not started, not enabled): $(slurmd -V)"

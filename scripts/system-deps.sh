#!/usr/bin/env bash
# Install the servers the backends' tests start (PostgreSQL, PgBouncer, Redis), the tools
# of the soak's nemesis (iproute2, libfaketime), and the browser the dashboard's
# test drives (chromium: Playwright's own download is not used), when they are missing and
# we can: as root, or with passwordless sudo, on Debian.
set -euo pipefail

missing=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 \
  || missing+=(postgresql)
PATH="$PATH:/usr/sbin" command -v pgbouncer >/dev/null 2>&1 || missing+=(pgbouncer)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
# The soak's nemesis: a worker in a network namespace (ip), one under a skewed clock.
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || missing+=(faketime)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
[ ${#missing[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  echo "system-deps: please install ${missing[*]} (no apt-get here)" >&2
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if sudo -n true 2>/dev/null; then sudo="sudo -n"; else
    echo "system-deps: please install ${missing[*]} (needs root)" >&2
    exit 0
  fi
fi
echo "system-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

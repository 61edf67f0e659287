# Sourced by scripts/test and scripts/demo: make .venv and install redrive with the
# extras given, saying what each phase does (on stderr, so `scripts/demo --json` stays
# data). The install is skipped when pyproject.toml and the extras are unchanged since
# the last one that finished (the stamp is .venv/.redrive-installed; delete it, or set
# REDRIVE_REINSTALL=1, to force one).
# Usage: . scripts/_venv.sh; ensure_venv SCRIPT EXTRAS     e.g. ensure_venv scripts/test dev

say() { printf '%s: %s\n' "$1" "$2" >&2; }

ensure_venv() {
  local who="$1" extras="$2" py="${PYTHON:-python3}" stamp=.venv/.redrive-installed want
  if [ ! -x .venv/bin/python ]; then
    say "$who" "creating the virtualenv .venv with $py"
    "$py" -m venv .venv
  fi
  want="$extras $(cksum < pyproject.toml)"
  if [ -z "${REDRIVE_REINSTALL:-}" ] && [ -f "$stamp" ] && grep -qxF "$want" "$stamp"; then
    say "$who" "redrive[$extras] already installed in .venv (pyproject.toml unchanged; REDRIVE_REINSTALL=1 forces a reinstall)"
    return
  fi
  say "$who" "upgrading pip in .venv"
  .venv/bin/python -m pip install --quiet --upgrade pip >/dev/null
  say "$who" "installing redrive[$extras] and its dependencies into .venv (the first time takes a few minutes; pip prints what it fetches)"
  if ! .venv/bin/python -m pip install --progress-bar off -e ".[$extras]" \
    | { grep --line-buffered -E '^(Collecting|Successfully installed)' >&2 || true; }; then
    say "$who" "pip install failed (its error is above)"
    exit 1
  fi
  printf '%s\n' "$want" >> "$stamp"
  say "$who" "installed"
}

#!/usr/bin/env bash
# Create bench/.venv (Python >= 3.12) with the pinned peers and an editable install of dtq.
# Re-running is cheap: nothing is reinstalled while requirements.txt and pyproject.toml match
# the stamp of the last successful install.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
venv="$here/.venv"
stamp="$venv/.installed-stamp"

ok_python() {
  [ -n "$1" ] && [ -x "$1" ] && "$1" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null
}

find_python() {
  local cand
  for cand in "${PYTHON:-}" \
      "$(pyenv root 2>/dev/null)/versions/3.12.1/bin/python3.12" \
      "$(command -v python3.12 || true)" \
      "$(command -v python3.13 || true)" \
      "$(command -v python3 || true)"; do
    if ok_python "$cand"; then echo "$cand"; return 0; fi
  done
  echo "bench needs Python >= 3.12 (none found; set PYTHON=/path/to/python3.12)" >&2
  return 1
}

want="$(cat "$here/requirements.txt" "$root/pyproject.toml" | cksum)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && ok_python "$venv/bin/python"; then
  echo "bench/.venv is up to date"
  exit 0
fi

if ! ok_python "$venv/bin/python"; then
  rm -rf "$venv"
  "$(find_python)" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet -r "$here/requirements.txt"
"$venv/bin/python" -m pip install --quiet -e "$root"
echo "$want" > "$stamp"
echo "bench/.venv ready: $("$venv/bin/python" --version)"

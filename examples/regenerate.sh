#!/usr/bin/env bash
# Regenerates what the repository shows of the demo's data, from a fresh demo in ./data:
#   - the three notebooks, executed with their outputs (notebooks/*.ipynb);
#   - the report's screenshot that the manual shows (docs/src/images/report.png).
# Needs python3 with venv and Chromium (Debian: `apt-get install chromium`). The notebooks run in
# the test suite's virtualenv (notebooks/requirements.txt, under the cargo target directory),
# made here if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/creator-etl/target}"

cargo build --locked --quiet
bin="$CARGO_TARGET_DIR/debug/creator-etl"

# A fresh demo: ./data is removed only when a demo made it (the demo refuses any other).
if [ -e data/.demo ]; then rm -rf data; fi
"$bin" demo --out data >/dev/null

venv="$CARGO_TARGET_DIR/tmp/notebook-venv"
if ! cmp -s notebooks/requirements.txt "$venv/requirements.installed"; then
  python3 -m venv --clear "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r notebooks/requirements.txt
  cp notebooks/requirements.txt "$venv/requirements.installed"
fi
for nb in notebooks/*.ipynb; do
  env -u CREATOR_ETL_LAKE -u CREATOR_ETL_ORG -u CREATOR_ETL_WAREHOUSE \
    "$venv/bin/python" notebooks/execute.py "$nb" --write
done

chromium=$(command -v chromium || command -v chromium-browser)
sandbox=()
if [ "$(id -u)" = 0 ]; then sandbox=(--no-sandbox); fi
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
"$chromium" --headless "${sandbox[@]}" --disable-gpu --hide-scrollbars --no-first-run \
  --user-data-dir="$profile" --window-size=1200,2000 \
  --screenshot="$PWD/docs/src/images/report.png" "file://$PWD/data/report/index.html" 2>/dev/null
echo "regenerated notebooks/*.ipynb and docs/src/images/report.png from $PWD/data"

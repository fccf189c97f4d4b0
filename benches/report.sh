#!/usr/bin/env bash
# The report's cost on a fleet warehouse of N organizations (200 applications, 120 days each):
#   bash benches/report.sh BIN [N] [REPS]
# BIN is a creator-etl binary (e.g. target/release/creator-etl). It serves N organizations from
# `creator-etl emulator` in its own process (no pacing on either side), loads them with one
# `fleet run` (not timed), then times REPS runs of `creator-etl report --out OUT` and prints each
# wall time and their median.
set -euo pipefail
BIN=$1; N=${2:-100}; REPS=${3:-3}
W=$(mktemp -d)
"$BIN" emulator --port 0 --organizations "$N" --org-applications 200 --content-years 1 --applications 50 \
  --min-interval-ms 0 --hourly-cap 0 > "$W/emu.out" 2> "$W/emu.err" &
EMU=$!
trap 'kill $EMU 2>/dev/null; rm -rf "$W"' EXIT
for _ in $(seq 50); do [ -s "$W/emu.out" ] && break; sleep 0.2; done
URL=$(head -1 "$W/emu.out")
{ echo '[defaults]'; echo 'since_days = 120'
  for k in $(seq "$N"); do echo "[[organization]]"; echo "name = \"o$k\""; echo "key_env = \"K$k\""; done
} > "$W/fleet.toml"
for k in $(seq "$N"); do export "K$k=emu-org-$k-key"; done
CREATOR_MIN_INTERVAL_MS=0 CREATOR_HOURLY_CAP=0 "$BIN" --quiet --base-url "$URL" --out "$W/out" \
  fleet run --config "$W/fleet.toml" > /dev/null
times=()
for r in $(seq "$REPS"); do
  s=$(date +%s.%N); code=0; "$BIN" --quiet report --out "$W/out" > /dev/null || code=$?; e=$(date +%s.%N)
  # 7: written, some organization not fresh; anything else is a failure, not a measurement.
  if [ "$code" != 0 ] && [ "$code" != 7 ]; then echo "report failed (exit $code)" >&2; exit 1; fi
  t=$(python3 -c "print(f'{$e - $s:.2f}')"); times+=("$t"); echo "report $r: $t s"
done
echo "median of $REPS: $(printf '%s\n' "${times[@]}" | sort -n | sed -n "$(( (REPS + 1) / 2 ))p") s"

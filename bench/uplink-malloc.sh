# Sourced by the benchmarks that start uplink (ingest.sh, failover.sh): uplink runs with the
# malloc settings of its systemd unit, read from the unit itself so that the benchmarks measure
# what nodes run. Sets UPLINK_MALLOC_ENV, an array for `env`.
#   UPLINK_ARENAS          MALLOC_ARENA_MAX instead of the unit's
#   UPLINK_MMAP_THRESHOLD  MALLOC_MMAP_THRESHOLD_ instead of the unit's; set but empty: glibc's
#                          dynamic threshold
# shellcheck shell=bash
uplink_unit=$(dirname "${BASH_SOURCE[0]}")/../image/overlay/node/usr/lib/systemd/system/uplink.service
# The unit's value of a variable set on one of its Environment= lines.
unit_env() {
  sed -n 's/^Environment=//p' "$uplink_unit" | tr ' ' '\n' | sed -n "s/^$1=//p" | tail -n 1
}
UPLINK_ARENAS=${UPLINK_ARENAS:-$(unit_env MALLOC_ARENA_MAX)}
UPLINK_MMAP_THRESHOLD=${UPLINK_MMAP_THRESHOLD-$(unit_env MALLOC_MMAP_THRESHOLD_)}
if [ -z "$UPLINK_ARENAS" ]; then
  echo "bench: no MALLOC_ARENA_MAX in $uplink_unit, and UPLINK_ARENAS is not set" >&2
  exit 1
fi
UPLINK_MALLOC_ENV=(MALLOC_ARENA_MAX="$UPLINK_ARENAS")
if [ -n "$UPLINK_MMAP_THRESHOLD" ]; then
  UPLINK_MALLOC_ENV+=(MALLOC_MMAP_THRESHOLD_="$UPLINK_MMAP_THRESHOLD")
fi

#!/usr/bin/env bash
# uplink-config: node identity and config at boot, without baking them into the image.
#
# Looks for a filesystem labelled UPLINK (the config drive, vfat or iso9660) and, failing that,
# for `uplink.config=URL` on the kernel command line (a .tar.gz of the same layout, fetched over
# HTTP after a DHCP lease on the first NIC). Layout (the same as the Debian image's, see
# /work/vm-interface.md and nix/README.md):
#   hostname                 -> the node's hostname (and [node] name if no uplink file sets one)
#   uplink/                  -> /etc/uplink/ (uplink.toml, conf.d/...)
#   network/*.nmconnection   -> /etc/NetworkManager/system-connections/ (mode 0600)
#   network/*.link           -> /etc/systemd/network/ (stable NIC names), applied at once
#   ssh/authorized_keys      -> /root/.ssh/authorized_keys
#   frr/                     -> /etc/frr/
#   sysctl.conf              -> /etc/sysctl.d/90-uplink-config.conf, applied
#   setup.sh                 -> /run/uplink-config/setup.sh, run by uplink-config-setup.service
#                               after network-online.target
# On NixOS a file that the system configuration manages (a symlink into /etc/static) is never
# overwritten: the Nix configuration wins and the skipped file is named in the log.
#
# Usage: uplink-config                 boot mode: find the drive or the URL and apply it
#        uplink-config --from-dir DIR  apply an unpacked tree (manual use and tests)
# UPLINK_CONFIG_ROOT prefixes every path written (tests); UPLINK_CONFIG_CMDLINE names the file
# read instead of /proc/cmdline; UPLINK_CONFIG_LABEL overrides the label (default UPLINK).
set -euo pipefail

root="${UPLINK_CONFIG_ROOT:-}"
label="${UPLINK_CONFIG_LABEL:-UPLINK}"
cmdline_file="${UPLINK_CONFIG_CMDLINE:-/proc/cmdline}"

log() { echo "uplink-config: $*"; }
die() {
  echo "uplink-config: error: $*" >&2
  exit 1
}

# A destination NixOS manages is a symlink into the read-only /etc/static tree.
nix_managed() {
  [ -L "$1" ] && case "$(readlink "$1")" in /etc/static/* | /nix/store/*) true ;; *) false ;; esac
}

# install_file SRC DEST MODE: copy one file unless NixOS manages DEST.
install_file() {
  local src="$1" dest="$2" mode="$3"
  if nix_managed "$dest"; then
    log "skipping $dest: managed by the NixOS configuration"
    return 0
  fi
  mkdir -p "$(dirname "$dest")"
  rm -f "$dest"
  install -m "$mode" "$src" "$dest"
}

# install_tree SRC_DIR DEST_DIR MODE: every regular file below SRC_DIR, keeping the layout.
install_tree() {
  local src="$1" dest="$2" mode="$3" rel
  while IFS= read -r -d '' file; do
    rel="${file#"$src"/}"
    install_file "$file" "$dest/$rel" "$mode"
  done < <(find "$src" -type f -print0 | sort -z)
}

# True when some TOML file of the uplink config sets `name` inside its [node] table.
uplink_sets_node_name() {
  local dir="$1" file
  for file in "$dir/uplink.toml" "$dir"/conf.d/*.toml; do
    [ -f "$file" ] || continue
    if awk '/^[[:space:]]*\[/ { in_node = ($0 ~ /^[[:space:]]*\[node\][[:space:]]*(#.*)?$/) }
            in_node && /^[[:space:]]*name[[:space:]]*=/ { found = 1 }
            END { exit !found }' "$file"; then
      return 0
    fi
  done
  return 1
}

apply_tree() {
  local src="$1" name=""
  if [ -f "$src/hostname" ]; then
    name="$(tr -d '[:space:]' <"$src/hostname")"
    [ -n "$name" ] || die "$src/hostname is empty"
    case "$name" in *[!A-Za-z0-9.-]*) die "invalid hostname '$name'" ;; esac
    if [ -z "$root" ]; then
      echo "$name" >/proc/sys/kernel/hostname
    fi
    if nix_managed "$root/etc/hostname"; then
      log "skipping $root/etc/hostname: managed by the NixOS configuration"
    else
      mkdir -p "$root/etc"
      rm -f "$root/etc/hostname"
      echo "$name" >"$root/etc/hostname"
    fi
  fi
  if [ -d "$src/uplink" ]; then
    install_tree "$src/uplink" "$root/etc/uplink" 0600
  fi
  # uplink matches node_selectors against [node] name; give it the hostname unless a file
  # names the node already (two different names would be a conflict uplink rejects).
  if [ -n "$name" ] && [ -f "$root/etc/uplink/uplink.toml" ] && ! uplink_sets_node_name "$root/etc/uplink"; then
    mkdir -p "$root/etc/uplink/conf.d"
    printf '# Written by uplink-config from the hostname of the config source.\n[node]\nname = "%s"\n' \
      "$name" >"$root/etc/uplink/conf.d/00-uplink-config-node.toml"
    chmod 0600 "$root/etc/uplink/conf.d/00-uplink-config-node.toml"
  fi
  if [ -d "$src/network" ]; then
    local conn link named=""
    # systemd.link files: udev named the NICs before this hook ran; a triggered "add" names
    # them again while they are still down (NetworkManager starts after this hook).
    for link in "$src"/network/*.link; do
      [ -f "$link" ] || continue
      install_file "$link" "$root/etc/systemd/network/$(basename "$link")" 0644
      named=1
    done
    if [ -n "$named" ] && [ -z "$root" ]; then
      udevadm control --reload || true
      udevadm trigger --action=add --subsystem-match=net || true
      udevadm settle --timeout=30 || true
      # udev may refuse to rename a NIC it named already: rename what it left.
      local mac want dev
      for link in "$src"/network/*.link; do
        [ -f "$link" ] || continue
        mac=$(awk -F= '$1 == "MACAddress" || $1 == "PermanentMACAddress" { print tolower($2) }' "$link")
        want=$(awk -F= '$1 == "Name" { print $2 }' "$link")
        if [ -z "$mac" ] || [ -z "$want" ]; then continue; fi
        for dev in /sys/class/net/*; do
          [ -e "$dev/device" ] || continue # a NIC, not a VLAN with its MAC
          [ "$(cat "$dev/address" 2>/dev/null)" = "$mac" ] || continue
          [ "$(basename "$dev")" = "$want" ] && continue
          ip link set dev "$(basename "$dev")" down || true
          ip link set dev "$(basename "$dev")" name "$want" || true
        done
      done
    fi
    for conn in "$src"/network/*.nmconnection; do
      [ -f "$conn" ] || continue
      install_file "$conn" "$root/etc/NetworkManager/system-connections/$(basename "$conn")" 0600
    done
  fi
  if [ -f "$src/ssh/authorized_keys" ]; then
    mkdir -p "$root/root/.ssh"
    chmod 0700 "$root/root/.ssh"
    install_file "$src/ssh/authorized_keys" "$root/root/.ssh/authorized_keys" 0600
  fi
  if [ -d "$src/frr" ]; then
    install_tree "$src/frr" "$root/etc/frr" 0640
    if [ -z "$root" ] && grep -q "^frr:" /etc/group; then
      chgrp -R frr /etc/frr
    fi
  fi
  if [ -f "$src/sysctl.conf" ]; then
    install_file "$src/sysctl.conf" "$root/etc/sysctl.d/90-uplink-config.conf" 0644
    if [ -z "$root" ]; then
      sysctl -p /etc/sysctl.d/90-uplink-config.conf
    fi
  fi
  if [ -f "$src/setup.sh" ]; then
    install_file "$src/setup.sh" "$root/run/uplink-config/setup.sh" 0700
  fi
}

# The first NIC (sorted by name) that is a real device, not lo or a virtual interface.
first_nic() {
  local dev
  for dev in /sys/class/net/*; do
    [ -e "$dev/device" ] || continue
    basename "$dev"
    return 0
  done
  return 1
}

fetch_url() {
  local url="$1" dest="$2" nic
  nic="$(first_nic)" || die "uplink.config=$url given but there is no NIC to fetch it over"
  log "DHCP on $nic to fetch $url"
  ip link set dev "$nic" up
  dhcpcd --oneshot --ipv4only --noipv4ll --waitip=4 --timeout 60 "$nic"
  local rc=0
  curl --fail --silent --show-error --location --retry 5 --retry-connrefused \
    --connect-timeout 10 --max-time 120 --output "$dest" "$url" || rc=$?
  # Leave the NIC as the boot found it: NetworkManager configures it from the profiles.
  dhcpcd --exit "$nic" >/dev/null 2>&1 || true
  ip addr flush dev "$nic" || true
  [ "$rc" -eq 0 ] || die "cannot fetch $url (curl exit $rc)"
}

work=""
main() {
  work="$(mktemp -d -t uplink-config.XXXXXX)"
  # Unmount before removing: the drive is mounted inside the work directory.
  trap 'umount "$work/drive" 2>/dev/null || true; rm -rf "$work"' EXIT

  if [ "${1:-}" = "--from-dir" ]; then
    [ -d "${2:-}" ] || die "usage: uplink-config --from-dir DIR"
    apply_tree "$2"
    log "applied from $2"
    return 0
  fi
  [ $# -eq 0 ] || die "usage: uplink-config [--from-dir DIR]"

  local dev url=""
  dev="$(blkid --list-one --output device --match-token "LABEL=$label" || true)"
  if [ -n "$dev" ]; then
    mkdir "$work/drive"
    mount -o ro "$dev" "$work/drive"
    apply_tree "$work/drive"
    log "applied from config drive $dev (label $label)"
    return 0
  fi

  local word words=()
  read -r -a words <"$cmdline_file" || true
  for word in "${words[@]}"; do
    case "$word" in uplink.config=*) url="${word#uplink.config=}" ;; esac
  done
  if [ -n "$url" ]; then
    fetch_url "$url" "$work/config.tar.gz"
    mkdir "$work/tree"
    tar -xzf "$work/config.tar.gz" -C "$work/tree" --no-same-owner
    apply_tree "$work/tree"
    log "applied from $url"
    return 0
  fi
  log "no config drive labelled $label and no uplink.config= on the kernel command line; nothing applied"
}

main "$@"

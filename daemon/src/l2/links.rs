//! The node's interfaces as layer 2 mode needs them: which may answer ARP and NDP, with
//! their index and Ethernet address. Read from sysfs (`/sys/class/net`), as MetalLB's
//! announcer reads it, and for the same reasons: an interface that is down, enslaved to a
//! bond or bridge (its master answers), or marked NOARP is skipped.

use std::fs;
use std::path::Path;

/// `IFF_UP`, `IFF_BROADCAST`, `IFF_LOOPBACK`, `IFF_NOARP` (netdevice(7)).
const IFF_UP: u32 = 0x1;
const IFF_BROADCAST: u32 = 0x2;
const IFF_LOOPBACK: u32 = 0x8;
const IFF_NOARP: u32 = 0x80;

/// An interface that may answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    pub name: String,
    pub index: u32,
    pub mac: [u8; 6],
    /// The kernel's count of the link's carrier changes: a link that went down and up between
    /// two reads is seen by it (its addresses are then announced again).
    pub carrier_changes: u64,
}

/// The interfaces that may answer, by name.
pub fn answering_links() -> Vec<Link> {
    answering_links_in(Path::new("/sys/class/net"))
}

fn answering_links_in(root: &Path) -> Vec<Link> {
    let Ok(entries) = fs::read_dir(root) else { return Vec::new() };
    let mut out: Vec<Link> = entries
        .flatten()
        .filter_map(|entry| link(&entry.path(), &entry.file_name().to_string_lossy()))
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn link(dir: &Path, name: &str) -> Option<Link> {
    let read = |file: &str| fs::read_to_string(dir.join(file)).ok();
    let flags = read("flags")
        .and_then(|text| u32::from_str_radix(text.trim().trim_start_matches("0x"), 16).ok())?;
    let usable = flags & IFF_UP != 0
        && flags & IFF_BROADCAST != 0
        && flags & (IFF_LOOPBACK | IFF_NOARP) == 0
        && !dir.join("master").exists()
        // Up without a carrier (a cable out, a veth whose peer is down): frames go nowhere.
        && read("carrier").is_none_or(|c| c.trim() == "1");
    if !usable {
        return None;
    }
    let index = read("ifindex")?.trim().parse().ok()?;
    let mac = parse_mac(read("address")?.trim())?;
    let carrier_changes =
        read("carrier_changes").and_then(|c| c.trim().parse().ok()).unwrap_or_default();
    Some(Link { name: name.to_string(), index, mac, carrier_changes })
}

fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = text.split(':');
    for octet in &mut mac {
        *octet = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interface(
        root: &Path,
        name: &str,
        flags: &str,
        index: u32,
        mac: &str,
    ) -> std::path::PathBuf {
        let dir = root.join(name);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("flags"), format!("{flags}\n")).unwrap();
        fs::write(dir.join("ifindex"), format!("{index}\n")).unwrap();
        fs::write(dir.join("address"), format!("{mac}\n")).unwrap();
        dir
    }

    #[test]
    fn down_enslaved_loopback_and_noarp_interfaces_do_not_answer() {
        let root = std::env::temp_dir().join(format!("uplink-links-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        interface(&root, "eth0", "0x1003", 2, "52:54:00:12:34:56");
        interface(&root, "eth1", "0x1002", 3, "52:54:00:12:34:57"); // down
        let no_carrier = interface(&root, "eth3", "0x1003", 7, "52:54:00:12:34:59");
        fs::write(no_carrier.join("carrier"), "0\n").unwrap();
        let enslaved = interface(&root, "eth2", "0x1803", 4, "52:54:00:12:34:58");
        fs::create_dir_all(enslaved.join("master")).unwrap();
        interface(&root, "lo", "0x9", 1, "00:00:00:00:00:00");
        interface(&root, "wg0", "0x10d1", 5, "00:00:00:00:00:00"); // NOARP, point to point
        let bond = interface(&root, "bond0", "0x1403", 6, "52:54:00:aa:bb:cc");
        fs::write(bond.join("carrier"), "1\n").unwrap();
        fs::write(bond.join("carrier_changes"), "4\n").unwrap();
        let links = answering_links_in(&root);
        let _ = fs::remove_dir_all(&root);
        assert_eq!(
            links,
            [
                Link {
                    name: "bond0".into(),
                    index: 6,
                    mac: [0x52, 0x54, 0, 0xaa, 0xbb, 0xcc],
                    carrier_changes: 4
                },
                Link {
                    name: "eth0".into(),
                    index: 2,
                    mac: [0x52, 0x54, 0, 0x12, 0x34, 0x56],
                    carrier_changes: 0
                },
            ]
        );
        assert_eq!(parse_mac("52:54:00:12:34"), None);
        assert_eq!(parse_mac("52:54:00:12:34:56:78"), None);
    }
}

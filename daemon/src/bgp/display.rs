//! Text forms shared by logs and `show` output.

use super::wire::attributes::well_known;

/// A standard community as FRR prints it: well-known names, else `asn:value`.
pub fn community(c: u32) -> String {
    match c {
        well_known::NO_EXPORT => "no-export".into(),
        well_known::NO_ADVERTISE => "no-advertise".into(),
        well_known::NO_EXPORT_SUBCONFED => "local-AS".into(),
        well_known::NO_PEER => "no-peer".into(),
        well_known::BLACKHOLE => "blackhole".into(),
        well_known::GRACEFUL_SHUTDOWN => "graceful-shutdown".into(),
        _ => format!("{}:{}", c >> 16, c & 0xffff),
    }
}

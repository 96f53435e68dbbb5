//! One description of a router's BGP setup, rendered into FRR, BIRD or GoBGP config, so every
//! interop scenario runs against all three implementations with the same code.

use super::{wait_for, Bird, Frr, Gobgp, Lab, Ns};
use std::fmt::Write as _;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Frr,
    Bird,
    Gobgp,
}

#[derive(Clone, Debug, Default)]
pub struct NeighborSpec {
    pub address: String,
    pub asn: u32,
    pub password: Option<String>,
    /// eBGP multihop TTL.
    pub multihop: Option<u8>,
    /// Our address for this session (multihop sessions source from a loopback).
    pub source: Option<String>,
}

#[derive(Clone, Debug, Default)]
pub struct SpeakerSpec {
    pub asn: u32,
    pub router_id: String,
    pub neighbors: Vec<NeighborSpec>,
    /// Prefixes this router originates (IPv4 and IPv6 mixed).
    pub announce: Vec<String>,
}

/// A running third-party speaker.
pub enum Speaker {
    Frr(Frr),
    Bird(Bird),
    Gobgp(Gobgp, SpeakerSpec),
}

fn is_v6(s: &str) -> bool {
    s.contains(':')
}

impl Speaker {
    pub fn start(kind: Kind, lab: &mut Lab, ns: &Ns, spec: &SpeakerSpec) -> Speaker {
        match kind {
            Kind::Frr => Speaker::Frr(Frr::start(lab, ns, &frr_conf(spec))),
            Kind::Bird => Speaker::Bird(Bird::start(lab, ns, &bird_conf(spec))),
            Kind::Gobgp => {
                let g = Gobgp::start(lab, ns, &gobgp_conf(spec));
                // Originate through the API once it answers.
                wait_for("gobgpd API", Duration::from_secs(20), || {
                    let out = g.gobgp(&["global"]);
                    if out.contains("AS") {
                        Ok(())
                    } else {
                        Err(out)
                    }
                });
                for p in &spec.announce {
                    let afi = if is_v6(p) { "ipv6" } else { "ipv4" };
                    let out = g.gobgp(&["global", "rib", "add", "-a", afi, p]);
                    assert!(!out.to_lowercase().contains("error"), "gobgp rib add {p}: {out}");
                }
                Speaker::Gobgp(g, spec.clone())
            }
        }
    }

    pub fn label(&self) -> String {
        match self {
            Speaker::Frr(f) => f.label.clone(),
            Speaker::Bird(b) => b.label.clone(),
            Speaker::Gobgp(g, _) => g.label.clone(),
        }
    }

    /// Whether the session with `neighbor` is Established, as the speaker itself reports it.
    pub fn established(&self, neighbor: &str) -> bool {
        match self {
            Speaker::Frr(f) => {
                let v = f.json("show bgp neighbors json");
                v[neighbor]["bgpState"].as_str() == Some("Established")
            }
            Speaker::Bird(b) => b.established(&bird_proto(neighbor)),
            // GoBGP's JSON uses the numeric session state; 6 is Established.
            Speaker::Gobgp(g, _) => g.neighbor_state(neighbor) == "6",
        }
    }

    /// Asks the speaker to send ROUTE-REFRESH to `neighbor` (RFC 2918): a soft inbound reset.
    /// Returns false for GoBGP, whose soft reset re-reads its own Adj-RIB-In instead of asking.
    pub fn request_refresh(&self, neighbor: &str) -> bool {
        let out = match self {
            Speaker::Frr(f) => f.vtysh(&format!("clear bgp {neighbor} soft in")),
            Speaker::Bird(b) => b.birdc(&format!("reload in {}", bird_proto(neighbor))),
            Speaker::Gobgp(..) => return false,
        };
        assert!(!out.to_lowercase().contains("error"), "refresh request failed: {out}");
        true
    }

    /// Whether the speaker has a route for exactly `prefix` (learned or its own).
    pub fn has_route(&self, prefix: &str) -> bool {
        self.route_text(prefix).is_some()
    }

    /// The speaker's description of its route to `prefix`, when it has one.
    pub fn route_text(&self, prefix: &str) -> Option<String> {
        match self {
            Speaker::Frr(f) => {
                let v = f.route(prefix);
                v["paths"].as_array().filter(|p| !p.is_empty()).map(|_| v.to_string())
            }
            Speaker::Bird(b) => {
                let out = b.birdc(&format!("show route {prefix} all"));
                out.contains(prefix).then_some(out)
            }
            Speaker::Gobgp(g, _) => {
                let afi = if is_v6(prefix) { "ipv6" } else { "ipv4" };
                let out = g.gobgp(&["global", "rib", "-a", afi, prefix]);
                out.contains(prefix).then_some(out)
            }
        }
    }
}

impl Speaker {
    /// Everything the speaker says about its route to `prefix`, in its most detailed form (the
    /// next hops included: FRR's and GoBGP's JSON, BIRD's `show route all`).
    pub fn route_detail(&self, prefix: &str) -> String {
        match self {
            Speaker::Frr(f) => f.route(prefix).to_string(),
            Speaker::Bird(b) => b.birdc(&format!("show route {prefix} all")),
            Speaker::Gobgp(g, _) => {
                let afi = if is_v6(prefix) { "ipv6" } else { "ipv4" };
                g.gobgp(&["global", "rib", "-a", afi, prefix, "-j"])
            }
        }
    }
}

pub fn bird_proto(neighbor: &str) -> String {
    format!("n_{}", neighbor.replace(['.', ':'], "_"))
}

pub fn frr_conf(spec: &SpeakerSpec) -> String {
    let mut c = String::new();
    let _ = writeln!(c, "frr defaults datacenter\nhostname peer\nrouter bgp {}", spec.asn);
    let _ = writeln!(c, " bgp router-id {}", spec.router_id);
    c.push_str(" no bgp ebgp-requires-policy\n no bgp default ipv4-unicast\n no bgp network import-check\n");
    c.push_str(" bgp bestpath as-path multipath-relax\n");
    for n in &spec.neighbors {
        let _ = writeln!(c, " neighbor {} remote-as {}", n.address, n.asn);
        let _ = writeln!(c, " neighbor {} timers connect 1", n.address);
        if let Some(p) = &n.password {
            let _ = writeln!(c, " neighbor {} password {p}", n.address);
        }
        if let Some(ttl) = n.multihop {
            let _ = writeln!(c, " neighbor {} ebgp-multihop {ttl}", n.address);
        }
        if let Some(src) = &n.source {
            let _ = writeln!(c, " neighbor {} update-source {src}", n.address);
        }
    }
    for (afi, v6) in [("ipv4", false), ("ipv6", true)] {
        let _ = writeln!(c, " address-family {afi} unicast");
        for p in spec.announce.iter().filter(|p| is_v6(p) == v6) {
            let _ = writeln!(c, "  network {p}");
        }
        for n in spec.neighbors.iter().filter(|n| is_v6(&n.address) == v6) {
            let _ = writeln!(c, "  neighbor {} activate", n.address);
        }
        c.push_str("  maximum-paths 8\n  maximum-paths ibgp 8\n exit-address-family\n");
    }
    c
}

/// `bird_conf(spec)` exporting everything, plus `count` blackhole /24s from 16.0.0.0/24 on
/// (static protocol `bulk`): a large table from one BIRD.
pub fn bird_bulk_conf(spec: &SpeakerSpec, count: usize) -> String {
    let mut c = bird_conf(spec).replace("export where source = RTS_STATIC", "export all");
    c.push_str("protocol static bulk { ipv4;\n");
    for i in 0..count {
        let _ = writeln!(
            c,
            "  route {}.{}.{}.0/24 blackhole;",
            16 + i / 65536,
            (i / 256) % 256,
            i % 256
        );
    }
    c.push_str("}\n");
    c
}

pub fn bird_conf(spec: &SpeakerSpec) -> String {
    let mut c = String::new();
    let _ = writeln!(c, "router id {};\nprotocol device {{}}", spec.router_id);
    for (afi, v6) in [("ipv4", false), ("ipv6", true)] {
        let routes: Vec<&String> = spec.announce.iter().filter(|p| is_v6(p) == v6).collect();
        let _ = writeln!(c, "protocol static static_{afi} {{ {afi};");
        for p in routes {
            let _ = writeln!(c, "  route {p} blackhole;");
        }
        c.push_str("}\n");
    }
    for n in &spec.neighbors {
        let afi = if is_v6(&n.address) { "ipv6" } else { "ipv4" };
        let _ = writeln!(c, "protocol bgp {} {{", bird_proto(&n.address));
        let _ = writeln!(c, "  local as {};\n  neighbor {} as {};", spec.asn, n.address, n.asn);
        c.push_str("  connect retry time 1;\n  error wait time 1, 5;\n");
        if let Some(p) = &n.password {
            let _ = writeln!(c, "  password \"{p}\";");
        }
        if let Some(ttl) = n.multihop {
            let _ = writeln!(c, "  multihop {ttl};");
        }
        if let Some(src) = &n.source {
            let _ = writeln!(c, "  source address {src};");
        }
        let _ = writeln!(c, "  {afi} {{ import all; export where source = RTS_STATIC; }};\n}}");
    }
    c
}

pub fn gobgp_conf(spec: &SpeakerSpec) -> String {
    let mut c = String::new();
    let _ =
        writeln!(c, "[global.config]\n  as = {}\n  router-id = \"{}\"", spec.asn, spec.router_id);
    for n in &spec.neighbors {
        let _ = writeln!(c, "\n[[neighbors]]\n  [neighbors.config]");
        let _ = writeln!(c, "    neighbor-address = \"{}\"\n    peer-as = {}", n.address, n.asn);
        if let Some(p) = &n.password {
            let _ = writeln!(c, "    auth-password = \"{p}\"");
        }
        let _ = writeln!(c, "  [neighbors.timers.config]\n    connect-retry = 1");
        if let Some(ttl) = n.multihop {
            let _ = writeln!(
                c,
                "  [neighbors.ebgp-multihop.config]\n    enabled = true\n    multihop-ttl = {ttl}"
            );
        }
        if let Some(src) = &n.source {
            let _ = writeln!(c, "  [neighbors.transport.config]\n    local-address = \"{src}\"");
        }
        let afi = if is_v6(&n.address) { "ipv6-unicast" } else { "ipv4-unicast" };
        let _ = writeln!(c, "  [[neighbors.afi-safis]]\n    [neighbors.afi-safis.config]\n      afi-safi-name = \"{afi}\"");
    }
    c
}

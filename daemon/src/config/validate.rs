//! One file's raw TOML → a validated fragment, with every problem in the file reported.
//!
//! A fragment holds model values with defaults applied, plus the source positions that the merge
//! step needs to report conflicts and dangling references. Values that fail validation are left
//! out (a field falls back to its default, a neighbor without a usable address is dropped), so
//! the rest of the file is still checked.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use ipnet::IpNet;

use super::announce::{AnnounceFragment, RawAnnounce};
use super::community::Community;
use super::duration::{bare_number_hint, format_duration, parse_duration};
use super::error::{ConfigError, Loc};
use super::model::{
    AddressFamily, AdvertisePolicy, AllowMode, BfdProfile, Neighbor, Password, PrefixMatch,
    ReceivePolicy, RemoteAsn,
};
use super::raw::{
    BoolOrInt, RawAdvertise, RawBfdProfile, RawBgp, RawDuration, RawFile, RawNeighbor,
    RawPrefixMatch, RawReceive, RawRouter, S,
};
use super::source::SourceText;
use crate::announce::model::RouterLabels;

pub(crate) const DEFAULT_PORT: u16 = 179;
pub(crate) const DEFAULT_HOLD_TIME: Duration = Duration::from_secs(90);
pub(crate) const DEFAULT_CONNECT_TIME: Duration = Duration::from_secs(5);
pub(crate) const DEFAULT_MAXIMUM_PATHS: u16 = 64;
pub(crate) const DEFAULT_MULTIPATH_RELAX: bool = true;
pub(crate) const DEFAULT_INSTALL: bool = true;
/// FRR's default metric for BGP routes in the kernel.
pub(crate) const DEFAULT_METRIC: u32 = 20;
pub(crate) const DEFAULT_BFD_INTERVAL: Duration = Duration::from_millis(300);
pub(crate) const DEFAULT_BFD_ECHO_INTERVAL: Duration = Duration::from_millis(50);
pub(crate) const DEFAULT_BFD_DETECT_MULTIPLIER: u8 = 3;
pub(crate) const DEFAULT_BFD_MINIMUM_TTL: u8 = 254;
/// Linux `TCP_MD5SIG_MAXKEYLEN`; RFC 2385 itself sets no limit but the kernel does.
pub(crate) const TCP_MD5_MAX_KEY_LEN: usize = 80;
/// RFC 6793 §9: AS_TRANS is reserved for 2-octet AS speakers and never configured.
const AS_TRANS: i64 = 23456;

/// One file's validated content.
#[derive(Debug)]
pub(crate) struct Fragment {
    pub file: PathBuf,
    pub routers: Vec<RouterFragment>,
    pub bfd_profiles: Vec<BfdProfileFragment>,
    pub always_block: Vec<IpNet>,
    /// `[fib] nexthop_objects`, where this file sets it.
    pub nexthop_objects: Option<(bool, Loc)>,
    pub announce: AnnounceFragment,
    pub network: super::network_validate::NetworkFragment,
}

#[derive(Debug)]
pub(crate) struct RouterFragment {
    /// `bgp.routers[i]` in this file.
    pub field: String,
    pub vrf: String,
    pub asn: u32,
    pub asn_loc: Loc,
    /// Router-level settings are `None` when the file leaves them out, so that a fragment that
    /// only adds neighbors does not conflict with the main file's choice.
    pub id: Option<(Ipv4Addr, Loc)>,
    pub maximum_paths: Option<(u16, Loc)>,
    pub multipath_relax: Option<(bool, Loc)>,
    pub install: Option<(bool, Loc)>,
    pub table: Option<(u32, Loc)>,
    pub metric: Option<(u32, Loc)>,
    pub prefixes: Vec<IpNet>,
    pub prefixes_loc: Loc,
    pub neighbors: Vec<NeighborFragment>,
    pub imports: Vec<String>,
}

#[derive(Debug)]
pub(crate) struct NeighborFragment {
    /// `bgp.routers[i].neighbors[j]` in this file.
    pub field: String,
    /// Where the neighbor's `address` is written.
    pub loc: Loc,
    /// Defaults applied; `to_advertise` carries only the mode, its prefixes are in `advertised`.
    pub neighbor: Neighbor,
    /// Positions of the session settings written in the file, by field name.
    pub field_locs: Vec<(&'static str, Loc)>,
    pub advertised: Vec<AdvertisedPrefix>,
}

impl NeighborFragment {
    pub fn written(&self, name: &str) -> bool {
        self.field_locs.iter().any(|(field, _)| *field == name)
    }

    /// Where a session setting is written, or the neighbor's address if it is left out.
    pub fn loc_of(&self, name: &str) -> &Loc {
        // `asn` and `dynamic_asn` are one setting written two ways.
        let same = |field: &str| field == name || (is_asn(field) && is_asn(name));
        self.field_locs.iter().find(|(field, _)| same(field)).map_or(&self.loc, |(_, loc)| loc)
    }
}

fn is_asn(field: &str) -> bool {
    field == "asn" || field == "dynamic_asn"
}

/// One prefix named under `to_advertise`, kept with its position for the cross-checks against
/// the merged router's prefixes.
#[derive(Debug, Clone)]
pub(crate) struct AdvertisedPrefix {
    pub prefix: IpNet,
    pub how: Advertised,
    pub loc: Loc,
    pub field: String,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Advertised {
    Allowed,
    WithLocalPref(u32),
    WithCommunity(Community),
}

#[derive(Debug)]
pub(crate) struct BfdProfileFragment {
    pub profile: BfdProfile,
    pub loc: Loc,
    pub field: String,
}

/// Validates one file. Errors go to `errors`; the fragment holds what was valid.
pub(crate) fn validate_file(
    source: &SourceText<'_>,
    raw: RawFile,
    errors: &mut Vec<ConfigError>,
) -> Fragment {
    let mut check = Checker { source, errors };
    let mut fragment = Fragment {
        file: source.path.clone(),
        routers: Vec::new(),
        bfd_profiles: Vec::new(),
        always_block: Vec::new(),
        nexthop_objects: None,
        announce: AnnounceFragment::default(),
        network: Default::default(),
    };
    let announce = RawAnnounce {
        node: raw.node,
        pools: raw.pools,
        services: raw.services,
        advertisements: raw.advertisements,
        communities: raw.communities,
        networks: raw.networks,
        route_advertisements: raw.route_advertisements,
    };
    fragment.announce = super::announce::validate(source, announce, &mut *check.errors);
    fragment.network = super::network_validate::validate(
        source,
        raw.network,
        raw.network_policies,
        &mut *check.errors,
    );
    if let Some(fib) = raw.fib {
        let loc = source.loc(fib.span().start);
        fragment.nexthop_objects = fib.into_inner().nexthop_objects.map(|on| (on, loc));
    }
    for (index, text) in raw.always_block.iter().enumerate() {
        if let Some(prefix) = check.prefix(text, &format!("always_block[{index}]")) {
            fragment.always_block.push(prefix);
        }
    }
    if let Some(bgp) = raw.bgp {
        check.bgp(bgp, &mut fragment);
    }
    fragment
}

struct Checker<'s, 'e> {
    source: &'s SourceText<'s>,
    errors: &'e mut Vec<ConfigError>,
}

impl Checker<'_, '_> {
    fn fail<T>(&mut self, value: &S<T>, field: &str, message: impl Into<String>) {
        self.errors.push(self.source.error_at(&value.span(), field, message));
    }

    fn loc<T>(&self, value: &S<T>) -> Loc {
        self.source.loc(value.span().start)
    }

    fn file_dir(&self) -> &Path {
        self.source.path.parent().unwrap_or(Path::new("."))
    }

    fn bgp(&mut self, bgp: RawBgp, fragment: &mut Fragment) {
        for (index, raw) in bgp.bfd_profiles.iter().enumerate() {
            let field = format!("bgp.bfd_profiles[{index}]");
            let Some(profile) = self.bfd_profile(raw.get_ref(), &field) else { continue };
            let loc = self.loc(&raw.get_ref().name);
            // frr-k8s rejects the same profile name twice in one configuration.
            if let Some(first) =
                fragment.bfd_profiles.iter().find(|p| p.profile.name == profile.name)
            {
                self.errors.push(loc.error(
                    format!("{field}.name"),
                    format!(
                        "BFD profile \"{}\" is already defined at line {} ({}); give each profile a distinct name",
                        profile.name, first.loc.line, first.field
                    ),
                ));
                continue;
            }
            fragment.bfd_profiles.push(BfdProfileFragment { profile, loc, field });
        }
        for (index, raw) in bgp.routers.into_iter().enumerate() {
            let field = format!("bgp.routers[{index}]");
            let header = self.loc(&raw);
            let raw = raw.into_inner();
            let labels = raw.labels.clone();
            let Some(router) = self.router(raw, &field, header) else { continue };
            if !labels.is_empty() {
                fragment.announce.router_labels.push(RouterLabels {
                    config_name: format!("{}:{field}", self.source.path.display()),
                    labels,
                    vrf: router.vrf.clone(),
                    neighbors: router.neighbors.iter().map(|n| n.neighbor.address).collect(),
                });
            }
            if let Some(first) = fragment.routers.iter().find(|r| r.vrf == router.vrf) {
                let message = format!(
                    "a router for VRF {} is already defined at line {} ({}); there is one router per VRF, so put \
                     its neighbors and prefixes in one [[bgp.routers]] table",
                    vrf_display(&router.vrf),
                    first.asn_loc.line,
                    first.field
                );
                self.errors.push(router.asn_loc.error(format!("{field}.vrf"), message));
                continue;
            }
            fragment.routers.push(router);
        }
    }

    fn router(&mut self, raw: RawRouter, field: &str, header: Loc) -> Option<RouterFragment> {
        let asn = self.asn(&raw.asn, &format!("{field}.asn"));
        let vrf = match &raw.vrf {
            Some(vrf) => self.vrf_name(vrf, &format!("{field}.vrf")).unwrap_or_default(),
            None => String::new(),
        };
        let id = raw.id.as_ref().and_then(|id| {
            let name = format!("{field}.id");
            let Ok(address) = Ipv4Addr::from_str(id.get_ref()) else {
                self.fail(id, &name, format!("\"{}\" is not an IPv4 address; the router ID is written like \"10.0.0.1\"", id.get_ref()));
                return None;
            };
            // RFC 6286 §2.1: the BGP Identifier is a non-zero 32-bit quantity.
            if address.is_unspecified() {
                self.fail(id, &name, "the router ID must be non-zero (RFC 6286 §2.1); use one of the node's IPv4 addresses");
                return None;
            }
            Some((address, self.loc(id)))
        });
        let maximum_paths = raw.maximum_paths.as_ref().and_then(|value| {
            let paths = self.int_in::<u16>(
                value,
                &format!("{field}.maximum_paths"),
                1..=256,
                "ECMP paths",
            )?;
            Some((paths, self.loc(value)))
        });
        let multipath_relax =
            raw.multipath_relax.as_ref().map(|value| (*value.get_ref(), self.loc(value)));
        let install = raw.install.as_ref().map(|value| (*value.get_ref(), self.loc(value)));
        let table = raw.table.as_ref().and_then(|value| {
            let name = format!("{field}.table");
            // rtnetlink.h: 0 is RT_TABLE_UNSPEC, 253 default, 255 local — not ours to fill.
            if matches!(*value.get_ref(), 0 | 253 | 255) {
                self.fail(value, &name, format!("table {} is reserved by the kernel (0 unspec, 253 default, 255 local); use 254 for main or a table of your own such as 100", value.get_ref()));
                return None;
            }
            let table = self.int_in::<u32>(value, &name, 1..=i64::from(u32::MAX), "routing table ids")?;
            Some((table, self.loc(value)))
        });
        let metric = raw.metric.as_ref().and_then(|value| {
            let metric = self.int_in::<u32>(
                value,
                &format!("{field}.metric"),
                0..=i64::from(u32::MAX),
                "route metrics",
            )?;
            Some((metric, self.loc(value)))
        });
        let mut prefixes = BTreeSet::new();
        for (index, text) in raw.prefixes.iter().enumerate() {
            if let Some(prefix) = self.prefix(text, &format!("{field}.prefixes[{index}]")) {
                prefixes.insert(prefix);
            }
        }
        let mut imports = Vec::new();
        for (index, import) in raw.imports.iter().enumerate() {
            let name = format!("{field}.imports[{index}].vrf");
            let vrf = import.get_ref().vrf.get_ref();
            // `""` or "default" name the default VRF, as in frr-k8s.
            if vrf.is_empty() || vrf == "default" {
                imports.push(String::new());
            } else if let Some(vrf) = self.vrf_name(&import.get_ref().vrf, &name) {
                imports.push(vrf);
            }
        }
        let mut neighbors: Vec<NeighborFragment> = Vec::new();
        for (index, neighbor) in raw.neighbors.iter().enumerate() {
            let neighbor_field = format!("{field}.neighbors[{index}]");
            let Some(neighbor) = self.neighbor(neighbor, &neighbor_field) else { continue };
            if let Some(first) =
                neighbors.iter().find(|n| n.neighbor.address == neighbor.neighbor.address)
            {
                let message = format!(
                    "neighbor {} is already defined at line {} ({}); a router has one session per neighbor address",
                    neighbor.neighbor.address, first.loc.line, first.field
                );
                self.errors.push(neighbor.loc.error(format!("{neighbor_field}.address"), message));
                continue;
            }
            neighbors.push(neighbor);
        }
        Some(RouterFragment {
            field: field.to_string(),
            vrf,
            asn: asn?,
            asn_loc: self.loc(&raw.asn),
            id,
            maximum_paths,
            multipath_relax,
            install,
            table,
            metric,
            prefixes: prefixes.into_iter().collect(),
            prefixes_loc: header,
            neighbors,
            imports,
        })
    }

    fn neighbor(&mut self, raw: &S<RawNeighbor>, field: &str) -> Option<NeighborFragment> {
        let header = raw.span();
        let raw = raw.get_ref();
        let mut field_locs: Vec<(&'static str, Loc)> = Vec::new();
        let address = self.ip(&raw.address, &format!("{field}.address"));
        if let Some(address) = address {
            if address.is_unspecified() || address.is_multicast() {
                self.fail(
                    &raw.address,
                    &format!("{field}.address"),
                    format!("{address} cannot be a BGP peer; give the peer's unicast address"),
                );
            }
        }

        // Exactly one of `asn` and `dynamic_asn`.
        let remote_asn = match (&raw.asn, &raw.dynamic_asn) {
            (Some(asn), None) => {
                field_locs.push(("asn", self.loc(asn)));
                self.asn(asn, &format!("{field}.asn")).map(RemoteAsn::Fixed)
            }
            (None, Some(dynamic)) => {
                field_locs.push(("dynamic_asn", self.loc(dynamic)));
                match dynamic.get_ref().as_str() {
                    "internal" => Some(RemoteAsn::Internal),
                    "external" => Some(RemoteAsn::External),
                    other => {
                        self.fail(dynamic, &format!("{field}.dynamic_asn"), format!("\"{other}\" is not valid; write \"internal\" (iBGP, the peer has our AS) or \"external\" (eBGP, any other AS)"));
                        None
                    }
                }
            }
            (Some(_), Some(dynamic)) => {
                self.fail(
                    dynamic,
                    &format!("{field}.dynamic_asn"),
                    "set either asn (a fixed AS number) or dynamic_asn, not both",
                );
                None
            }
            (None, None) => {
                self.errors.push(self.source.error_at(&header, field, "missing the peer's AS: set asn = <number> or dynamic_asn = \"internal\" | \"external\""));
                None
            }
        };

        let port = match &raw.port {
            Some(port) => {
                field_locs.push(("port", self.loc(port)));
                self.int_in::<u16>(port, &format!("{field}.port"), 1..=65535, "TCP port")
                    .unwrap_or(DEFAULT_PORT)
            }
            None => DEFAULT_PORT,
        };

        let source_address = raw.source_address.as_ref().and_then(|text| {
            field_locs.push(("source_address", self.loc(text)));
            let name = format!("{field}.source_address");
            let source = self.ip(text, &name)?;
            match address {
                Some(address) if source.is_ipv4() != address.is_ipv4() => {
                    self.fail(text, &name, format!("{source} and the neighbor address {address} are of different families; use an address of the same family"));
                    None
                }
                _ => Some(source),
            }
        });

        let password = self.password(raw, field, &mut field_locs);

        // RFC 4271 §4.2: Hold Time is zero or at least three seconds, in a 16-bit field of seconds.
        let hold_time = match &raw.hold_time {
            Some(hold) => {
                field_locs.push(("hold_time", self.loc(hold)));
                let name = format!("{field}.hold_time");
                self.whole_seconds(hold, &name).and_then(|hold| {
                    if hold == Duration::ZERO || (3..=65535).contains(&hold.as_secs()) {
                        Some(hold)
                    } else {
                        self.fail(raw.hold_time.as_ref()?, &name, format!("\"{}\" is out of range; write \"0s\" (no keepalives) or \"3s\" to \"65535s\" (RFC 4271 §4.2)", format_duration(hold)));
                        None
                    }
                })
            }
            None => None,
        }
        .unwrap_or(DEFAULT_HOLD_TIME);

        // RFC 4271 §10: the suggested KeepaliveTime is one third of the Hold Time.
        let keepalive_time = match &raw.keepalive_time {
            Some(keepalive) => {
                field_locs.push(("keepalive_time", self.loc(keepalive)));
                let name = format!("{field}.keepalive_time");
                self.whole_seconds(keepalive, &name).and_then(|value| {
                    if hold_time != Duration::ZERO && (value == Duration::ZERO || value >= hold_time) {
                        self.fail(keepalive, &name, format!("must be at least \"1s\" and less than hold_time (\"{}\"); e.g. \"{}\"", format_duration(hold_time), format_duration(default_keepalive(hold_time).max(Duration::from_secs(1)))));
                        None
                    } else {
                        Some(value)
                    }
                })
            }
            None => None,
        }
        .unwrap_or_else(|| default_keepalive(hold_time));

        let connect_time = match &raw.connect_time {
            Some(connect) => {
                field_locs.push(("connect_time", self.loc(connect)));
                let name = format!("{field}.connect_time");
                self.whole_seconds(connect, &name).and_then(|value| {
                    if (1..=65535).contains(&value.as_secs()) {
                        Some(value)
                    } else {
                        self.fail(connect, &name, "must be \"1s\" to \"65535s\"");
                        None
                    }
                })
            }
            None => None,
        }
        .unwrap_or(DEFAULT_CONNECT_TIME);

        let ebgp_multihop = raw.ebgp_multihop.as_ref().and_then(|value| {
            field_locs.push(("ebgp_multihop", self.loc(value)));
            match *value.get_ref() {
                BoolOrInt::Bool(true) => Some(255),
                BoolOrInt::Bool(false) => None,
                BoolOrInt::Int(ttl) => self.small_int(
                    value,
                    ttl,
                    &format!("{field}.ebgp_multihop"),
                    1..=255,
                    "true (TTL 255), false, or a TTL from 1 to 255",
                ),
            }
        });
        // RFC 5082 §3: GTSM sends with TTL 255 and accepts only TTL >= 255 - (hops - 1).
        let ttl_security = raw.ttl_security.as_ref().and_then(|value| {
            field_locs.push(("ttl_security", self.loc(value)));
            let name = format!("{field}.ttl_security");
            let hops = match *value.get_ref() {
                BoolOrInt::Bool(true) => Some(1),
                BoolOrInt::Bool(false) => None,
                BoolOrInt::Int(hops) => self.small_int(value, hops, &name, 1..=254, "true (1 hop), false, or a hop count from 1 to 254"),
            }?;
            if let Some(ttl) = ebgp_multihop.filter(|ttl| *ttl > hops) {
                self.fail(value, &name, format!("ttl_security = {hops} accepts only peers within {hops} hop(s), but ebgp_multihop = {ttl} expects the peer up to {ttl} hops away; set ttl_security to at least {ttl} or lower ebgp_multihop (or remove one of them)"));
                return None;
            }
            Some(hops)
        });

        let passive = raw.passive.as_ref().is_some_and(|value| {
            field_locs.push(("passive", self.loc(value)));
            *value.get_ref()
        });
        let bfd_profile = raw.bfd_profile.as_ref().map(|name| {
            field_locs.push(("bfd_profile", self.loc(name)));
            name.get_ref().clone()
        });
        let max_prefixes = raw.max_prefixes.as_ref().and_then(|value| {
            field_locs.push(("max_prefixes", self.loc(value)));
            self.int_in::<u32>(
                value,
                &format!("{field}.max_prefixes"),
                1..=i64::from(u32::MAX),
                "prefixes",
            )
        });

        let families = match &raw.families {
            Some(list) => {
                field_locs.push(("families", self.loc(list)));
                self.families(list, &format!("{field}.families"))
            }
            None => address.map(|address| vec![AddressFamily::of(address)]),
        };

        let mut advertised = Vec::new();
        let to_advertise = match &raw.to_advertise {
            Some(to_advertise) => self.advertise_policy(
                to_advertise,
                &format!("{field}.to_advertise"),
                &mut advertised,
            ),
            None => AdvertisePolicy::default(),
        };
        let to_receive = match &raw.to_receive {
            Some(to_receive) => self.receive_policy(to_receive, &format!("{field}.to_receive")),
            None => ReceivePolicy::default(),
        };

        let neighbor = Neighbor {
            address: address?,
            remote_asn: remote_asn?,
            port,
            source_address,
            password,
            hold_time,
            keepalive_time,
            connect_time,
            ebgp_multihop,
            ttl_security,
            passive,
            bfd_profile,
            max_prefixes,
            families: families?,
            to_advertise,
            to_receive,
            sources: vec![self.source.path.clone()],
        };
        Some(NeighborFragment {
            field: field.to_string(),
            loc: self.loc(&raw.address),
            neighbor,
            field_locs,
            advertised,
        })
    }

    /// `password` or `password_file` (read now, relative to this file's directory).
    fn password(
        &mut self,
        raw: &RawNeighbor,
        field: &str,
        field_locs: &mut Vec<(&'static str, Loc)>,
    ) -> Option<Password> {
        let (key, value, name) = match (&raw.password, &raw.password_file) {
            (Some(_), Some(file)) => {
                self.fail(
                    file,
                    &format!("{field}.password_file"),
                    "set either password or password_file, not both",
                );
                return None;
            }
            (Some(password), None) => {
                (password.get_ref().clone(), password, format!("{field}.password"))
            }
            (None, Some(file)) => {
                let name = format!("{field}.password_file");
                let path = self.file_dir().join(file.get_ref());
                let text = match std::fs::read_to_string(&path) {
                    Ok(text) => text,
                    Err(error) => {
                        self.fail(file, &name, format!("cannot read {}: {error}; point it at a readable file holding the TCP-MD5 key", path.display()));
                        return None;
                    }
                };
                let key = text
                    .strip_suffix('\n')
                    .map(|k| k.strip_suffix('\r').unwrap_or(k))
                    .unwrap_or(&text);
                (key.to_string(), file, name)
            }
            (None, None) => return None,
        };
        field_locs.push(("password", self.loc(value)));
        if key.is_empty() {
            self.fail(
                value,
                &name,
                "the TCP-MD5 key is empty; remove the field to run without authentication",
            );
            return None;
        }
        // RFC 2385 gives no limit, but Linux rejects keys longer than TCP_MD5SIG_MAXKEYLEN.
        if key.len() > TCP_MD5_MAX_KEY_LEN {
            self.fail(value, &name, format!("the TCP-MD5 key is {} bytes; Linux accepts at most {TCP_MD5_MAX_KEY_LEN} (TCP_MD5SIG_MAXKEYLEN)", key.len()));
            return None;
        }
        Some(Password::new(key))
    }

    fn families(&mut self, list: &S<Vec<S<String>>>, field: &str) -> Option<Vec<AddressFamily>> {
        if list.get_ref().is_empty() {
            self.fail(list, field, "must list at least one of \"ipv4-unicast\", \"ipv6-unicast\"");
            return None;
        }
        let mut families = BTreeSet::new();
        for (index, text) in list.get_ref().iter().enumerate() {
            match text.get_ref().as_str() {
                "ipv4-unicast" => families.insert(AddressFamily::Ipv4Unicast),
                "ipv6-unicast" => families.insert(AddressFamily::Ipv6Unicast),
                other => {
                    self.fail(text, &format!("{field}[{index}]"), format!("unknown family \"{other}\"; valid families are \"ipv4-unicast\" and \"ipv6-unicast\""));
                    continue;
                }
            };
        }
        Some(families.into_iter().collect())
    }

    fn mode(&mut self, mode: Option<&S<String>>, field: &str) -> AllowMode {
        match mode.map(|m| (m, m.get_ref().as_str())) {
            None | Some((_, "filtered")) => AllowMode::Filtered,
            Some((_, "all")) => AllowMode::All,
            Some((value, other)) => {
                self.fail(
                    value,
                    field,
                    format!("\"{other}\" is not a mode; write \"all\" or \"filtered\""),
                );
                AllowMode::Filtered
            }
        }
    }

    fn advertise_policy(
        &mut self,
        raw: &RawAdvertise,
        field: &str,
        advertised: &mut Vec<AdvertisedPrefix>,
    ) -> AdvertisePolicy {
        let mut mode = AllowMode::Filtered;
        if let Some(allowed) = &raw.allowed {
            mode = self.mode(allowed.mode.as_ref(), &format!("{field}.allowed.mode"));
            if let Some(prefixes) = &allowed.prefixes {
                if mode == AllowMode::All && !prefixes.get_ref().is_empty() {
                    self.fail(prefixes, &format!("{field}.allowed.prefixes"), "mode = \"all\" already advertises every router prefix; remove this list or set mode = \"filtered\"");
                }
                for (index, text) in prefixes.get_ref().iter().enumerate() {
                    self.advertised(
                        text,
                        &format!("{field}.allowed.prefixes[{index}]"),
                        Advertised::Allowed,
                        advertised,
                    );
                }
            }
        }
        for (index, entry) in raw.with_local_pref.iter().enumerate() {
            let entry_field = format!("{field}.with_local_pref[{index}]");
            let entry = entry.get_ref();
            let local_pref = self.int_in::<u32>(
                &entry.local_pref,
                &format!("{entry_field}.local_pref"),
                0..=i64::from(u32::MAX),
                "LOCAL_PREF",
            );
            for (p, text) in entry.prefixes.iter().enumerate() {
                if let Some(local_pref) = local_pref {
                    self.advertised(
                        text,
                        &format!("{entry_field}.prefixes[{p}]"),
                        Advertised::WithLocalPref(local_pref),
                        advertised,
                    );
                }
            }
        }
        for (index, entry) in raw.with_community.iter().enumerate() {
            let entry_field = format!("{field}.with_community[{index}]");
            let entry = entry.get_ref();
            let community = match Community::from_str(entry.community.get_ref()) {
                Ok(community) => Some(community),
                Err(error) => {
                    self.fail(
                        &entry.community,
                        &format!("{entry_field}.community"),
                        error.to_string(),
                    );
                    None
                }
            };
            for (p, text) in entry.prefixes.iter().enumerate() {
                if let Some(community) = community {
                    self.advertised(
                        text,
                        &format!("{entry_field}.prefixes[{p}]"),
                        Advertised::WithCommunity(community),
                        advertised,
                    );
                }
            }
        }
        AdvertisePolicy { mode, ..AdvertisePolicy::default() }
    }

    fn advertised(
        &mut self,
        text: &S<String>,
        field: &str,
        how: Advertised,
        out: &mut Vec<AdvertisedPrefix>,
    ) {
        if let Some(prefix) = self.prefix(text, field) {
            out.push(AdvertisedPrefix {
                prefix,
                how,
                loc: self.loc(text),
                field: field.to_string(),
            });
        }
    }

    fn receive_policy(&mut self, raw: &RawReceive, field: &str) -> ReceivePolicy {
        let Some(allowed) = &raw.allowed else { return ReceivePolicy::default() };
        let mode = self.mode(allowed.mode.as_ref(), &format!("{field}.allowed.mode"));
        let mut matches = BTreeSet::new();
        if let Some(prefixes) = &allowed.prefixes {
            if mode == AllowMode::All && !prefixes.get_ref().is_empty() {
                self.fail(prefixes, &format!("{field}.allowed.prefixes"), "mode = \"all\" already accepts every prefix; remove this list or set mode = \"filtered\"");
            }
            for (index, entry) in prefixes.get_ref().iter().enumerate() {
                let entry_field = format!("{field}.allowed.prefixes[{index}]");
                if let Some(matched) = self.prefix_match(entry.get_ref(), &entry_field) {
                    matches.insert(matched);
                }
            }
        }
        let prefixes =
            if mode == AllowMode::All { Vec::new() } else { matches.into_iter().collect() };
        ReceivePolicy { mode, prefixes }
    }

    fn prefix_match(&mut self, raw: &RawPrefixMatch, field: &str) -> Option<PrefixMatch> {
        let prefix = self.prefix(&raw.prefix, &format!("{field}.prefix"))?;
        let (len, max) = (i64::from(prefix.prefix_len()), i64::from(prefix.max_prefix_len()));
        let ge = match &raw.ge {
            Some(ge) => Some(self.int_in::<u8>(
                ge,
                &format!("{field}.ge"),
                len..=max,
                &format!("prefix length for {prefix}"),
            )?),
            None => None,
        };
        let le = match &raw.le {
            Some(le) => {
                let low = ge.map_or(len, i64::from);
                Some(self.int_in::<u8>(
                    le,
                    &format!("{field}.le"),
                    low..=max,
                    &format!("prefix length for {prefix} (at least ge and the prefix length)"),
                )?)
            }
            None => None,
        };
        Some(PrefixMatch { prefix, ge, le })
    }

    fn bfd_profile(&mut self, raw: &RawBfdProfile, field: &str) -> Option<BfdProfile> {
        let name = raw.name.get_ref().clone();
        if name.is_empty() {
            self.fail(&raw.name, &format!("{field}.name"), "a BFD profile needs a non-empty name");
        }
        let interval = |check: &mut Self,
                        value: &Option<S<RawDuration>>,
                        key: &str,
                        default: Duration| match value {
            Some(value) => {
                check.millis_in(value, &format!("{field}.{key}"), 10..=60_000).unwrap_or(default)
            }
            None => default,
        };
        let receive_interval =
            interval(self, &raw.receive_interval, "receive_interval", DEFAULT_BFD_INTERVAL);
        let transmit_interval =
            interval(self, &raw.transmit_interval, "transmit_interval", DEFAULT_BFD_INTERVAL);
        let echo_interval =
            interval(self, &raw.echo_interval, "echo_interval", DEFAULT_BFD_ECHO_INTERVAL);
        // RFC 5880 §6.8.1: Detect Mult is a nonzero 8-bit value; FRR accepts 2..=255.
        let detect_multiplier =
            raw.detect_multiplier.as_ref().map_or(Some(DEFAULT_BFD_DETECT_MULTIPLIER), |value| {
                self.int_in::<u8>(value, &format!("{field}.detect_multiplier"), 2..=255, "packets")
            });
        let minimum_ttl = raw.minimum_ttl.as_ref().map_or(Some(DEFAULT_BFD_MINIMUM_TTL), |value| {
            self.int_in::<u8>(value, &format!("{field}.minimum_ttl"), 1..=254, "TTL")
        });
        // uplink runs asynchronous mode only (RFC 5880 §6.1); the Echo function (§6.4) is not
        // implemented, so a profile asking for it would silently not get it.
        if let Some(echo) = raw.echo_mode.as_ref().filter(|v| *v.get_ref()) {
            self.fail(
                echo,
                &format!("{field}.echo_mode"),
                "the BFD Echo function is not supported by uplink: remove echo_mode or set it to \
                 false (asynchronous mode still detects failures within transmit_interval × \
                 detect_multiplier)",
            );
        }
        if name.is_empty() {
            return None;
        }
        Some(BfdProfile {
            name,
            receive_interval,
            transmit_interval,
            detect_multiplier: detect_multiplier.unwrap_or(DEFAULT_BFD_DETECT_MULTIPLIER),
            echo_interval,
            echo_mode: raw.echo_mode.as_ref().is_some_and(|v| *v.get_ref()),
            passive_mode: raw.passive_mode.as_ref().is_some_and(|v| *v.get_ref()),
            minimum_ttl: minimum_ttl.unwrap_or(DEFAULT_BFD_MINIMUM_TTL),
        })
    }

    // ---- scalar checks ----

    /// RFC 6793: four-octet AS numbers; 0 is reserved (RFC 7607) and AS_TRANS is not configurable.
    fn asn(&mut self, value: &S<i64>, field: &str) -> Option<u32> {
        let asn = *value.get_ref();
        if asn == AS_TRANS {
            self.fail(value, field, "23456 is AS_TRANS, reserved for 2-octet AS speakers (RFC 6793 §9); use your real AS number, 1..=4294967295");
            return None;
        }
        if asn == 0 {
            self.fail(
                value,
                field,
                "AS 0 is reserved (RFC 7607); valid AS numbers are 1..=4294967295",
            );
            return None;
        }
        self.int_in::<u32>(value, field, 1..=i64::from(u32::MAX), "AS number")
    }

    fn int_in<T: TryFrom<i64>>(
        &mut self,
        value: &S<i64>,
        field: &str,
        range: RangeInclusive<i64>,
        what: &str,
    ) -> Option<T> {
        let number = *value.get_ref();
        self.small_int(
            value,
            number,
            field,
            range.clone(),
            &format!("{what} in {}..={}", range.start(), range.end()),
        )
    }

    /// Checks `number` (written at `value`) is in `range`; `valid` describes what would be valid.
    fn small_int<T: TryFrom<i64>, V>(
        &mut self,
        value: &S<V>,
        number: i64,
        field: &str,
        range: RangeInclusive<i64>,
        valid: &str,
    ) -> Option<T> {
        if !range.contains(&number) {
            self.fail(value, field, format!("{number} is out of range; expected {valid}"));
            return None;
        }
        T::try_from(number).ok()
    }

    fn ip(&mut self, value: &S<String>, field: &str) -> Option<IpAddr> {
        match IpAddr::from_str(value.get_ref()) {
            Ok(address) => Some(address),
            Err(_) => {
                self.fail(
                    value,
                    field,
                    format!(
                        "\"{}\" is not an IP address; write e.g. \"192.0.2.1\" or \"2001:db8::1\"",
                        value.get_ref()
                    ),
                );
                None
            }
        }
    }

    /// A CIDR prefix without host bits.
    fn prefix(&mut self, value: &S<String>, field: &str) -> Option<IpNet> {
        let text = value.get_ref();
        let Ok(prefix) = IpNet::from_str(text) else {
            let message = if let Ok(address) = IpAddr::from_str(text) {
                let len = if address.is_ipv4() { 32 } else { 128 };
                format!(
                    "\"{text}\" has no prefix length; write \"{text}/{len}\" for a single address"
                )
            } else {
                format!("\"{text}\" is not a CIDR prefix; write e.g. \"10.0.0.0/24\" or \"2001:db8::/64\"")
            };
            self.fail(value, field, message);
            return None;
        };
        if prefix.trunc() != prefix {
            self.fail(
                value,
                field,
                format!("{text} has host bits set; did you mean {}?", prefix.trunc()),
            );
            return None;
        }
        Some(prefix)
    }

    fn vrf_name(&mut self, value: &S<String>, field: &str) -> Option<String> {
        let name = value.get_ref();
        // A VRF is a Linux net device: the kernel's dev_valid_name() allows at most 15 bytes
        // (IFNAMSIZ - 1) and no '/', ':' or whitespace.
        let valid = name.len() < 16
            && name != "."
            && name != ".."
            && !name.chars().any(|c| c == '/' || c == ':' || c.is_whitespace());
        if !valid {
            self.fail(value, field, format!("\"{name}\" is not a valid VRF device name; use at most 15 bytes without '/', ':' or spaces (\"\" is the default VRF)"));
            return None;
        }
        Some(name.clone())
    }

    fn duration(&mut self, value: &S<RawDuration>, field: &str) -> Option<Duration> {
        match value.get_ref() {
            RawDuration::Number(number) => {
                self.fail(value, field, bare_number_hint(number));
                None
            }
            RawDuration::Text(text) => match parse_duration(text) {
                Ok(duration) => Some(duration),
                Err(error) => {
                    self.fail(value, field, error.to_string());
                    None
                }
            },
        }
    }

    /// BGP timers are carried in whole seconds (RFC 4271 §4.2).
    fn whole_seconds(&mut self, value: &S<RawDuration>, field: &str) -> Option<Duration> {
        let duration = self.duration(value, field)?;
        if duration.subsec_nanos() != 0 {
            let up = Duration::from_secs(duration.as_secs().saturating_add(1));
            self.fail(
                value,
                field,
                format!(
                    "BGP timers are whole seconds; write \"{}\" or \"{}\"",
                    format_duration(Duration::from_secs(duration.as_secs())),
                    format_duration(up)
                ),
            );
            return None;
        }
        Some(duration)
    }

    fn millis_in(
        &mut self,
        value: &S<RawDuration>,
        field: &str,
        range: RangeInclusive<u128>,
    ) -> Option<Duration> {
        let duration = self.duration(value, field)?;
        if !range.contains(&duration.as_millis()) {
            self.fail(
                value,
                field,
                format!(
                    "\"{}\" is out of range; expected \"{}ms\" to \"{}ms\"",
                    format_duration(duration),
                    range.start(),
                    range.end()
                ),
            );
            return None;
        }
        Some(duration)
    }
}

/// RFC 4271 §10 suggests a KeepaliveTime of one third of the Hold Time (whole seconds).
pub(crate) fn default_keepalive(hold_time: Duration) -> Duration {
    Duration::from_secs(hold_time.as_secs() / 3)
}

pub(crate) fn vrf_display(vrf: &str) -> String {
    if vrf.is_empty() {
        "\"\" (default)".to_string()
    } else {
        format!("\"{vrf}\"")
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv6Addr;

    use super::super::{load_str, ConfigError};
    use super::*;

    /// A router (lines 1-2) with one neighbor (lines 4-6); extra neighbor lines start at line 7.
    const BASE: &str = "[[bgp.routers]]\nasn = 65801\n\n[[bgp.routers.neighbors]]\naddress = \"172.18.20.1\"\nasn = 65102\n";
    const N0: &str = "bgp.routers[0].neighbors[0]";

    fn errors(text: &str) -> Vec<ConfigError> {
        load_str("t.toml", text).expect_err("config should be rejected").0
    }

    /// The only error for `text`, as (line, column, field, message).
    fn only_error(text: &str) -> (usize, usize, String, String) {
        let errors = errors(text);
        assert_eq!(errors.len(), 1, "expected one error, got: {errors:#?}");
        let e = errors.into_iter().next().unwrap();
        assert_eq!(e.file, PathBuf::from("t.toml"));
        (e.line, e.column, e.field, e.message)
    }

    /// `BASE` plus extra neighbor lines; the first extra line is line 7.
    fn neighbor_with(extra: &str) -> String {
        format!("{BASE}{extra}\n")
    }

    fn assert_error(text: &str, line: usize, column: usize, field: &str, message_part: &str) {
        let (l, c, f, m) = only_error(text);
        assert_eq!((l, c, f.as_str()), (line, column, field), "message: {m}");
        assert!(m.contains(message_part), "{m:?} should contain {message_part:?}");
    }

    fn neighbor(text: &str) -> Neighbor {
        let config = load_str("t.toml", text).unwrap();
        config.bgp.routers[0].neighbors[0].clone()
    }

    #[test]
    fn defaults_are_applied() {
        let config = load_str("t.toml", BASE).unwrap();
        let router = &config.bgp.routers[0];
        assert_eq!((router.asn, router.id, router.vrf.as_str()), (65801, None, ""));
        assert_eq!((router.maximum_paths, router.multipath_relax), (64, true));
        assert!(router.prefixes.is_empty());
        assert_eq!(router.sources, vec![PathBuf::from("t.toml")]);
        let n = &router.neighbors[0];
        assert_eq!(n.address, IpAddr::from([172, 18, 20, 1]));
        assert_eq!(n.remote_asn, RemoteAsn::Fixed(65102));
        assert_eq!(n.port, 179);
        assert_eq!(n.hold_time, Duration::from_secs(90));
        assert_eq!(n.keepalive_time, Duration::from_secs(30));
        assert_eq!(n.connect_time, Duration::from_secs(5));
        assert_eq!((n.ebgp_multihop, n.ttl_security, n.passive), (None, None, false));
        assert_eq!(
            (n.password.as_ref(), n.bfd_profile.as_ref(), n.max_prefixes),
            (None, None, None)
        );
        assert_eq!(n.families, vec![AddressFamily::Ipv4Unicast]);
        assert_eq!(n.to_advertise, AdvertisePolicy::default());
        assert_eq!(n.to_advertise.mode, AllowMode::Filtered);
        assert_eq!(n.to_receive, ReceivePolicy::default());
        assert!(config.always_block.is_empty());
    }

    #[test]
    fn bfd_profile_defaults() {
        let config = load_str("t.toml", "[[bgp.bfd_profiles]]\nname = \"p\"\n").unwrap();
        let expected = BfdProfile {
            name: "p".into(),
            receive_interval: Duration::from_millis(300),
            transmit_interval: Duration::from_millis(300),
            detect_multiplier: 3,
            echo_interval: Duration::from_millis(50),
            echo_mode: false,
            passive_mode: false,
            minimum_ttl: 254,
        };
        assert_eq!(config.bgp.bfd_profiles, vec![expected]);
    }

    #[test]
    fn ipv6_neighbor_defaults_to_ipv6_unicast() {
        let text = "[[bgp.routers]]\nasn = 65801\n[[bgp.routers.neighbors]]\naddress = \"2001:db8::1\"\ndynamic_asn = \"external\"\n";
        let n = neighbor(text);
        assert_eq!(n.address, IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)));
        assert_eq!(n.remote_asn, RemoteAsn::External);
        assert_eq!(n.families, vec![AddressFamily::Ipv6Unicast]);
    }

    #[test]
    fn router_asn_rules() {
        assert_error(
            "[[bgp.routers]]\nasn = 0\n",
            2,
            7,
            "bgp.routers[0].asn",
            "valid AS numbers are 1..=4294967295",
        );
        assert_error("[[bgp.routers]]\nasn = 23456\n", 2, 7, "bgp.routers[0].asn", "AS_TRANS");
        assert_error(
            "[[bgp.routers]]\nasn = 4294967296\n",
            2,
            7,
            "bgp.routers[0].asn",
            "expected AS number in 1..=4294967295",
        );
        assert_eq!(
            load_str("t", "[[bgp.routers]]\nasn = 4294967295\n").unwrap().bgp.routers[0].asn,
            u32::MAX
        );
    }

    #[test]
    fn router_id_and_vrf_rules() {
        assert_error(
            "[[bgp.routers]]\nasn = 1\nid = \"fe80::1\"\n",
            3,
            6,
            "bgp.routers[0].id",
            "is not an IPv4 address",
        );
        assert_error(
            "[[bgp.routers]]\nasn = 1\nid = \"0.0.0.0\"\n",
            3,
            6,
            "bgp.routers[0].id",
            "RFC 6286",
        );
        assert_error(
            "[[bgp.routers]]\nasn = 1\nvrf = \"a/b\"\n",
            3,
            7,
            "bgp.routers[0].vrf",
            "at most 15 bytes",
        );
        assert_error(
            "[[bgp.routers]]\nasn = 1\nvrf = \"sixteen-chars-xx\"\n",
            3,
            7,
            "bgp.routers[0].vrf",
            "not a valid VRF",
        );
    }

    #[test]
    fn prefixes_with_host_bits_show_the_corrected_prefix() {
        let text = "[[bgp.routers]]\nasn = 1\nprefixes = [\"10.128.7.0/24\", \"10.128.7.1/24\"]\n";
        assert_error(
            text,
            3,
            30,
            "bgp.routers[0].prefixes[1]",
            "10.128.7.1/24 has host bits set; did you mean 10.128.7.0/24?",
        );
        let text = "[[bgp.routers]]\nasn = 1\nprefixes = [\"2001:db8::1/64\"]\n";
        assert_error(text, 3, 13, "bgp.routers[0].prefixes[0]", "did you mean 2001:db8::/64?");
        let text = "[[bgp.routers]]\nasn = 1\nprefixes = [\"10.0.0.1\"]\n";
        assert_error(text, 3, 13, "bgp.routers[0].prefixes[0]", "write \"10.0.0.1/32\"");
        assert_error(
            "always_block = [\"10.0.0.0/33\"]\n",
            1,
            17,
            "always_block[0]",
            "is not a CIDR prefix",
        );
    }

    #[test]
    fn fib_settings_defaults_ranges_and_reserved_tables() {
        let config = load_str("t", "[[bgp.routers]]\nasn = 1\n").unwrap();
        let router = &config.bgp.routers[0];
        assert_eq!((router.install, router.table, router.metric), (true, None, 20));
        let config =
            load_str("t", "[[bgp.routers]]\nasn = 1\ninstall = false\ntable = 100\nmetric = 0\n")
                .unwrap();
        let router = &config.bgp.routers[0];
        assert_eq!((router.install, router.table, router.metric), (false, Some(100), 0));
        for reserved in ["0", "253", "255"] {
            assert_error(
                &format!("[[bgp.routers]]\nasn = 1\ntable = {reserved}\n"),
                3,
                9,
                "bgp.routers[0].table",
                "reserved by the kernel",
            );
        }
        assert_error(
            "[[bgp.routers]]\nasn = 1\ntable = 4294967296\n",
            3,
            9,
            "bgp.routers[0].table",
            "1..=4294967295",
        );
        assert_error(
            "[[bgp.routers]]\nasn = 1\nmetric = -1\n",
            3,
            10,
            "bgp.routers[0].metric",
            "0..=4294967295",
        );
        assert_error(
            "[[bgp.routers]]\nasn = 1\ninstall = 1\n",
            3,
            11,
            "bgp.routers[0].install",
            "boolean",
        );
    }

    #[test]
    fn maximum_paths_range() {
        assert_error(
            "[[bgp.routers]]\nasn = 1\nmaximum_paths = 0\n",
            3,
            17,
            "bgp.routers[0].maximum_paths",
            "1..=256",
        );
        assert_error(
            "[[bgp.routers]]\nasn = 1\nmaximum_paths = 257\n",
            3,
            17,
            "bgp.routers[0].maximum_paths",
            "1..=256",
        );
        let config = load_str(
            "t",
            "[[bgp.routers]]\nasn = 1\nmaximum_paths = 256\nmultipath_relax = false\n",
        )
        .unwrap();
        assert_eq!(
            (config.bgp.routers[0].maximum_paths, config.bgp.routers[0].multipath_relax),
            (256, false)
        );
    }

    #[test]
    fn one_router_per_vrf_in_a_file() {
        let text = "[[bgp.routers]]\nasn = 1\n[[bgp.routers]]\nasn = 2\nvrf = \"\"\n";
        assert_error(
            text,
            4,
            7,
            "bgp.routers[1].vrf",
            "already defined at line 2 (bgp.routers[0])",
        );
        let text = "[[bgp.routers]]\nasn = 1\n[[bgp.routers]]\nasn = 1\nvrf = \"red\"\n";
        assert_eq!(load_str("t", text).unwrap().bgp.routers.len(), 2);
    }

    #[test]
    fn neighbor_needs_exactly_one_of_asn_and_dynamic_asn() {
        let text =
            "[[bgp.routers]]\nasn = 1\n\n[[bgp.routers.neighbors]]\naddress = \"10.0.0.1\"\n";
        assert_error(
            text,
            4,
            1,
            N0,
            "set asn = <number> or dynamic_asn = \"internal\" | \"external\"",
        );
        assert_error(
            &neighbor_with("dynamic_asn = \"internal\""),
            7,
            15,
            &format!("{N0}.dynamic_asn"),
            "not both",
        );
        let text = "[[bgp.routers]]\nasn = 1\n\n[[bgp.routers.neighbors]]\naddress = \"10.0.0.1\"\ndynamic_asn = \"ibgp\"\n";
        assert_error(text, 6, 15, &format!("{N0}.dynamic_asn"), "write \"internal\"");
        assert_error(&BASE.replace("65102", "23456"), 6, 7, &format!("{N0}.asn"), "AS_TRANS");
    }

    #[test]
    fn neighbor_address_rules() {
        assert_error(
            &BASE.replace("172.18.20.1", "172.18.20"),
            5,
            11,
            &format!("{N0}.address"),
            "is not an IP address",
        );
        assert_error(
            &BASE.replace("172.18.20.1", "224.0.0.5"),
            5,
            11,
            &format!("{N0}.address"),
            "cannot be a BGP peer",
        );
        assert_error(
            &BASE.replace("172.18.20.1\"", "172.18.20.1\"\naddress = \"x\""),
            6,
            1,
            "bgp.routers[0].neighbors[0]",
            "duplicate key",
        );
        let text =
            format!("{BASE}[[bgp.routers.neighbors]]\naddress = \"172.18.20.1\"\nasn = 65102\n");
        assert_error(
            &text,
            8,
            11,
            "bgp.routers[0].neighbors[1].address",
            "neighbor 172.18.20.1 is already defined at line 5",
        );
    }

    #[test]
    fn port_and_source_address() {
        assert_error(
            &neighbor_with("port = 0"),
            7,
            8,
            &format!("{N0}.port"),
            "TCP port in 1..=65535",
        );
        assert_eq!(neighbor(&neighbor_with("port = 1179")).port, 1179);
        assert_error(
            &neighbor_with("source_address = \"2001:db8::2\""),
            7,
            18,
            &format!("{N0}.source_address"),
            "different families",
        );
        assert_eq!(
            neighbor(&neighbor_with("source_address = \"172.18.20.113\"")).source_address,
            Some(IpAddr::from([172, 18, 20, 113]))
        );
    }

    #[test]
    fn password_rules() {
        let key80 = "k".repeat(80);
        assert_eq!(
            neighbor(&neighbor_with(&format!("password = \"{key80}\""))).password.unwrap().expose(),
            key80
        );
        let key81 = "k".repeat(81);
        assert_error(
            &neighbor_with(&format!("password = \"{key81}\"")),
            7,
            12,
            &format!("{N0}.password"),
            "81 bytes; Linux accepts at most 80",
        );
        assert_error(&neighbor_with("password = \"\""), 7, 12, &format!("{N0}.password"), "empty");
        assert_error(
            &neighbor_with("password = \"a\"\npassword_file = \"f\""),
            8,
            17,
            &format!("{N0}.password_file"),
            "not both",
        );
    }

    #[test]
    fn password_file_is_read_relative_to_the_config_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("tor.key"), "s3cret\n").unwrap();
        let main = dir.path().join("uplink.toml");
        std::fs::write(&main, neighbor_with("password_file = \"tor.key\"")).unwrap();
        let config = super::super::load(&main).unwrap();
        assert_eq!(
            config.bgp.routers[0].neighbors[0].password.as_ref().unwrap().expose(),
            "s3cret"
        );

        std::fs::write(&main, neighbor_with("password_file = \"missing.key\"")).unwrap();
        let errors = super::super::load(&main).unwrap_err().0;
        assert_eq!(errors.len(), 1);
        assert_eq!(
            (errors[0].line, errors[0].column, errors[0].field.as_str()),
            (7, 17, "bgp.routers[0].neighbors[0].password_file")
        );
        assert!(
            errors[0].message.contains("cannot read") && errors[0].message.contains("missing.key"),
            "{}",
            errors[0].message
        );
    }

    #[test]
    fn hold_and_keepalive_rules() {
        let hold = format!("{N0}.hold_time");
        assert_error(
            &neighbor_with("hold_time = \"2s\""),
            7,
            13,
            &hold,
            "write \"0s\" (no keepalives) or \"3s\" to \"65535s\"",
        );
        assert_error(&neighbor_with("hold_time = \"65536s\""), 7, 13, &hold, "out of range");
        assert_error(
            &neighbor_with("hold_time = \"1500ms\""),
            7,
            13,
            &hold,
            "whole seconds; write \"1s\" or \"2s\"",
        );
        assert_error(
            &neighbor_with("hold_time = 90"),
            7,
            13,
            &hold,
            "write a duration string such as \"90s\"",
        );
        assert_error(&neighbor_with("hold_time = \"90\""), 7, 13, &hold, "write \"90s\"");
        let n = neighbor(&neighbor_with("hold_time = \"9s\""));
        assert_eq!(
            (n.hold_time, n.keepalive_time),
            (Duration::from_secs(9), Duration::from_secs(3))
        );
        let n = neighbor(&neighbor_with("hold_time = \"0s\""));
        assert_eq!((n.hold_time, n.keepalive_time), (Duration::ZERO, Duration::ZERO));
        let n = neighbor(&neighbor_with("hold_time = \"0s\"\nkeepalive_time = \"10s\""));
        assert_eq!(n.keepalive_time, Duration::from_secs(10));

        let keepalive = format!("{N0}.keepalive_time");
        assert_error(
            &neighbor_with("hold_time = \"30s\"\nkeepalive_time = \"30s\""),
            8,
            18,
            &keepalive,
            "less than hold_time (\"30s\"); e.g. \"10s\"",
        );
        assert_error(
            &neighbor_with("keepalive_time = \"0s\""),
            7,
            18,
            &keepalive,
            "at least \"1s\"",
        );
        assert_error(
            &neighbor_with("connect_time = \"0s\""),
            7,
            16,
            &format!("{N0}.connect_time"),
            "\"1s\" to \"65535s\"",
        );
        assert_eq!(
            neighbor(&neighbor_with("connect_time = \"2m\"")).connect_time,
            Duration::from_secs(120)
        );
    }

    #[test]
    fn multihop_and_gtsm() {
        assert_eq!(neighbor(&neighbor_with("ebgp_multihop = true")).ebgp_multihop, Some(255));
        assert_eq!(neighbor(&neighbor_with("ebgp_multihop = false")).ebgp_multihop, None);
        assert_eq!(neighbor(&neighbor_with("ebgp_multihop = 2")).ebgp_multihop, Some(2));
        assert_error(
            &neighbor_with("ebgp_multihop = 0"),
            7,
            17,
            &format!("{N0}.ebgp_multihop"),
            "a TTL from 1 to 255",
        );
        assert_error(
            &neighbor_with("ebgp_multihop = \"yes\""),
            7,
            17,
            &format!("{N0}.ebgp_multihop"),
            "expected true, false or an integer",
        );
        assert_eq!(neighbor(&neighbor_with("ttl_security = true")).ttl_security, Some(1));
        assert_eq!(
            neighbor(&neighbor_with("ttl_security = 3\nebgp_multihop = 3")).ttl_security,
            Some(3)
        );
        assert_error(
            &neighbor_with("ttl_security = 255"),
            7,
            16,
            &format!("{N0}.ttl_security"),
            "a hop count from 1 to 254",
        );
        assert_error(
            &neighbor_with("ebgp_multihop = true\nttl_security = true"),
            8,
            16,
            &format!("{N0}.ttl_security"),
            "ttl_security = 1 accepts only peers within 1 hop(s), but ebgp_multihop = 255",
        );
    }

    #[test]
    fn other_neighbor_settings() {
        assert_error(
            &neighbor_with("max_prefixes = 0"),
            7,
            16,
            &format!("{N0}.max_prefixes"),
            "1..=4294967295",
        );
        let n = neighbor(&neighbor_with(
            "max_prefixes = 1000\npassive = true\nfamilies = [\"ipv6-unicast\", \"ipv4-unicast\"]",
        ));
        assert_eq!((n.max_prefixes, n.passive), (Some(1000), true));
        assert_eq!(n.families, vec![AddressFamily::Ipv4Unicast, AddressFamily::Ipv6Unicast]);
        assert_error(
            &neighbor_with("families = []"),
            7,
            12,
            &format!("{N0}.families"),
            "at least one of",
        );
        assert_error(
            &neighbor_with("families = [\"ipv4-unicast\", \"l2vpn-evpn\"]"),
            7,
            29,
            &format!("{N0}.families[1]"),
            "valid families are",
        );
        assert_error(
            &neighbor_with("bfd_profile = \"fast\""),
            7,
            15,
            &format!("{N0}.bfd_profile"),
            "no BFD profile named \"fast\"; no [[bgp.bfd_profiles]] are defined",
        );
    }

    #[test]
    fn unknown_fields_list_the_valid_names() {
        let (line, column, field, message) = only_error(&neighbor_with("holdtime = \"90s\""));
        assert_eq!((line, column, field.as_str()), (7, 1, "bgp.routers[0].neighbors[0].holdtime"));
        assert!(
            message.contains("unknown field `holdtime`, expected one of `address`, `asn`"),
            "{message}"
        );
        assert!(message.contains("`hold_time`"), "{message}");
        let (line, column, field, message) = only_error("[bgp]\nrouter = []\n");
        assert_eq!((line, column, field.as_str()), (2, 1, "bgp.router"));
        assert!(message.contains("expected `routers` or `bfd_profiles`"), "{message}");
    }

    #[test]
    fn to_advertise_rules() {
        let router = "[[bgp.routers]]\nasn = 65801\nprefixes = [\"10.128.7.0/24\"]\n[[bgp.routers.neighbors]]\naddress = \"172.18.20.1\"\nasn = 65102\n";
        let with = |extra: &str| format!("{router}{extra}\n");
        let adv = format!("{N0}.to_advertise");
        assert_error(
            &with("to_advertise.allowed = { mode = \"all\", prefixes = [\"10.128.7.0/24\"] }"),
            7,
            51,
            &format!("{adv}.allowed.prefixes"),
            "remove this list or set mode = \"filtered\"",
        );
        assert_error(
            &with("to_advertise.allowed = { mode = \"some\" }"),
            7,
            33,
            &format!("{adv}.allowed.mode"),
            "write \"all\" or \"filtered\"",
        );
        assert_error(
            &with("to_advertise.allowed.prefixes = [\"10.128.8.0/24\"]"),
            7,
            34,
            &format!("{adv}.allowed.prefixes[0]"),
            "10.128.8.0/24 is not one of the router's prefixes (bgp.routers[0].prefixes at t.toml:1:1)",
        );
        assert_error(
            &with("to_advertise.with_local_pref = [{ local_pref = 200, prefixes = [\"10.128.7.0/24\"] }]"),
            7,
            65,
            &format!("{adv}.with_local_pref[0].prefixes[0]"),
            "is not advertised to neighbor 172.18.20.1; add it to to_advertise.allowed.prefixes",
        );
        assert_error(
            &with("to_advertise.with_community = [{ community = \"65536:1\", prefixes = [] }]"),
            7,
            46,
            &format!("{adv}.with_community[0].community"),
            "\"65536\" is not 0..=65535",
        );
        let n = neighbor(&with(
            "to_advertise.allowed.mode = \"all\"\nto_advertise.with_local_pref = [{ local_pref = 200, prefixes = [\"10.128.7.0/24\"] }]\nto_advertise.with_community = [{ community = \"no-export\", prefixes = [\"10.128.7.0/24\"] }]",
        ));
        let net: IpNet = "10.128.7.0/24".parse().unwrap();
        assert_eq!(n.to_advertise.mode, AllowMode::All);
        assert_eq!(
            n.to_advertise.with_local_pref,
            vec![super::super::LocalPrefPrefixes { local_pref: 200, prefixes: vec![net] }]
        );
        assert_eq!(
            n.to_advertise.with_community,
            vec![super::super::CommunityPrefixes {
                community: "no-export".parse().unwrap(),
                prefixes: vec![net]
            }]
        );
        assert_error(
            &with("to_advertise.allowed.prefixes = [\"10.128.7.0/24\"]\nto_advertise.with_local_pref = [{ local_pref = 1, prefixes = [\"10.128.7.0/24\"] }, { local_pref = 2, prefixes = [\"10.128.7.0/24\"] }]"),
            8,
            113,
            &format!("{adv}.with_local_pref[1].prefixes[0]"),
            "10.128.7.0/24 already has local_pref 1 at t.toml:8:63",
        );
    }

    #[test]
    fn to_receive_rules() {
        let recv = format!("{N0}.to_receive.allowed");
        let with = |entry: &str| neighbor_with(&format!("to_receive.allowed.prefixes = [{entry}]"));
        let n = neighbor(&with("{ prefix = \"0.0.0.0/0\" }, { prefix = \"10.0.0.0/8\", ge = 16, le = 24 }, { prefix = \"10.0.0.0/8\", le = 8 }"));
        assert_eq!(n.to_receive.mode, AllowMode::Filtered);
        let pm = |p: &str, ge, le| PrefixMatch { prefix: p.parse().unwrap(), ge, le };
        assert_eq!(
            n.to_receive.prefixes,
            vec![
                pm("0.0.0.0/0", None, None),
                pm("10.0.0.0/8", None, Some(8)),
                pm("10.0.0.0/8", Some(16), Some(24))
            ]
        );
        assert_error(
            &with("{ prefix = \"10.0.0.0/8\", ge = 7 }"),
            7,
            62,
            &format!("{recv}.prefixes[0].ge"),
            "expected prefix length for 10.0.0.0/8 in 8..=32",
        );
        assert_error(
            &with("{ prefix = \"10.0.0.0/8\", ge = 24, le = 16 }"),
            7,
            71,
            &format!("{recv}.prefixes[0].le"),
            "in 24..=32",
        );
        assert_error(
            &with("{ prefix = \"2001:db8::/32\", le = 129 }"),
            7,
            65,
            &format!("{recv}.prefixes[0].le"),
            "in 32..=128",
        );
        assert_error(
            &with("{ prefix = \"10.0.0.1/8\" }"),
            7,
            43,
            &format!("{recv}.prefixes[0].prefix"),
            "did you mean 10.0.0.0/8?",
        );
        assert_error(
            &neighbor_with(
                "to_receive.allowed = { mode = \"all\", prefixes = [{ prefix = \"0.0.0.0/0\" }] }",
            ),
            7,
            49,
            &format!("{recv}.prefixes"),
            "already accepts every prefix",
        );
        assert_eq!(
            neighbor(&neighbor_with("to_receive.allowed.mode = \"all\"")).to_receive.mode,
            AllowMode::All
        );
    }

    #[test]
    fn bfd_profile_rules() {
        let with = |extra: &str| format!("[[bgp.bfd_profiles]]\nname = \"p\"\n{extra}\n");
        assert_error(
            &with("receive_interval = \"5ms\""),
            3,
            20,
            "bgp.bfd_profiles[0].receive_interval",
            "expected \"10ms\" to \"60000ms\"",
        );
        assert_error(
            &with("transmit_interval = \"61s\""),
            3,
            21,
            "bgp.bfd_profiles[0].transmit_interval",
            "out of range",
        );
        assert_error(
            &with("echo_interval = 50"),
            3,
            17,
            "bgp.bfd_profiles[0].echo_interval",
            "\"50ms\"",
        );
        assert_error(
            &with("detect_multiplier = 1"),
            3,
            21,
            "bgp.bfd_profiles[0].detect_multiplier",
            "2..=255",
        );
        assert_error(
            &with("minimum_ttl = 255"),
            3,
            15,
            "bgp.bfd_profiles[0].minimum_ttl",
            "1..=254",
        );
        assert_error(
            &with("[[bgp.bfd_profiles]]\nname = \"p\""),
            4,
            8,
            "bgp.bfd_profiles[1].name",
            "already defined at line 2",
        );
        assert_error(
            "[[bgp.bfd_profiles]]\nname = \"\"\n",
            2,
            8,
            "bgp.bfd_profiles[0].name",
            "non-empty name",
        );
        assert_error(
            &with("echo_mode = true"),
            3,
            13,
            "bgp.bfd_profiles[0].echo_mode",
            "Echo function is not supported",
        );
        let config = load_str(
            "t",
            &with("echo_mode = false\npassive_mode = true\nreceive_interval = \"1s\""),
        )
        .unwrap();
        let profile = &config.bgp.bfd_profiles[0];
        assert_eq!(
            (profile.echo_mode, profile.passive_mode, profile.receive_interval),
            (false, true, Duration::from_secs(1))
        );
    }

    #[test]
    fn every_error_in_a_file_is_reported() {
        let text = "always_block = [\"1.2.3.4/8\"]\n[[bgp.routers]]\nasn = 0\nprefixes = [\"10.0.0.1/24\"]\n[[bgp.routers.neighbors]]\naddress = \"10.0.0.2\"\nasn = 65102\nhold_time = \"1s\"\nport = 70000\n";
        let found: Vec<(usize, String)> =
            errors(text).into_iter().map(|e| (e.line, e.field)).collect();
        assert_eq!(
            found,
            vec![
                (1, "always_block[0]".to_string()),
                (3, "bgp.routers[0].asn".to_string()),
                (4, "bgp.routers[0].prefixes[0]".to_string()),
                (9, format!("{N0}.port")),
                (8, format!("{N0}.hold_time")),
            ]
        );
    }

    #[test]
    fn syntax_errors_point_at_the_problem() {
        let (line, column, _, message) = only_error("[[bgp.routers]]\nasn = 65801\nvrf = \"red\n");
        // toml reports an unterminated string where it expected the closing quote.
        assert_eq!((line, column), (3, 11), "{message}");
        assert!(message.contains("invalid basic string, expected `\"`"), "{message}");
        let (line, column, field, message) =
            only_error("[[bgp.routers]]\nasn = 65801\nvrf \"red\"\n");
        assert_eq!((line, column, field.as_str()), (3, 5, "bgp.routers[0]"), "{message}");
    }
}

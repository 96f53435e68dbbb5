//! One `[[bgp.routers.neighbors]]` table → a validated neighbor, in parts: the peer, its
//! session timers, its transport (TTL, TCP-MD5), its families and its filters.

use super::*;

/// The session settings a file writes, with their positions: the merge compares them with
/// another file's and points at both.
#[derive(Default)]
struct Written(Vec<(&'static str, Loc)>);

impl Written {
    fn push(&mut self, field: &'static str, loc: Loc) {
        self.0.push((field, loc));
    }
}

struct Timers {
    hold_time: Duration,
    keepalive_time: Duration,
    send_hold_time: Option<Duration>,
    minimum_hold_time: Duration,
    connect_time: Duration,
}

/// The session timers a neighbor gets when it leaves them out. They differ with the kind of
/// file, so that a manifest means on uplink what it means under MetalLB or frr-k8s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimerDefaults {
    /// TOML files: hold 90 s and keepalive 30 s (the values RFC 4271 §10 suggests), connect
    /// retry 5 s. A node sits one hop from its top-of-rack routers, BFD detects failures in
    /// well under a second, and after a restart or a link flap the session should be back in
    /// seconds, not minutes: the same reasoning as FRR's `datacenter` profile, which goes
    /// further (3 s / 9 s / 10 s).
    Node,
    /// Kubernetes manifests (MetalLB `BGPPeer`, frr-k8s `FRRConfiguration`): both render no
    /// `timers` line when the fields are absent, so FRR's built-in (`traditional`) defaults
    /// apply: keepalive 60 s, hold 180 s, connect retry 120 s (frr-k8s documents
    /// "holdTime defaults to 180s", "keepaliveTime defaults to 60s"). With one of the two
    /// given, the other is derived as MetalLB derives it: keepalive = hold / 3, hold =
    /// 3 × keepalive.
    Upstream,
}

impl TimerDefaults {
    pub(crate) fn hold_time(self) -> Duration {
        match self {
            Self::Node => Duration::from_secs(90),
            Self::Upstream => Duration::from_secs(180),
        }
    }

    pub(crate) fn connect_time(self) -> Duration {
        match self {
            Self::Node => Duration::from_secs(5),
            Self::Upstream => Duration::from_secs(120),
        }
    }
}

struct Hops {
    ebgp_multihop: Option<u8>,
    ttl_security: Option<u8>,
}

impl Checker<'_, '_> {
    /// The neighbor as a whole: each group of settings is checked by its own part below, so
    /// every problem in the table is reported, and the neighbor is kept only when its address,
    /// AS and families are usable.
    pub(super) fn neighbor(
        &mut self,
        raw: &S<RawNeighbor>,
        field: &str,
        defaults: TimerDefaults,
    ) -> Option<NeighborFragment> {
        let header = raw.span();
        let raw = raw.get_ref();
        let mut written = Written::default();
        let address = self.peer_address(raw, field);
        let remote_asn = self.remote_asn(raw, field, &header, &mut written);
        let port = self.port(raw, field, &mut written);
        let source_address = self.source_address(raw, field, address, &mut written);
        let password = self.password(raw, field, &mut written.0);
        let timers = self.session_timers(raw, field, &mut written, defaults);
        let hops = self.hops(raw, field, &mut written);
        let passive = raw.passive.as_ref().is_some_and(|value| {
            written.push("passive", self.loc(value));
            *value.get_ref()
        });
        let graceful_restart = match &raw.graceful_restart {
            None => GracefulRestartMode::Helper,
            Some(value) => {
                written.push("graceful_restart", self.loc(value));
                if *value.get_ref() {
                    GracefulRestartMode::Enabled
                } else {
                    GracefulRestartMode::Disabled
                }
            }
        };
        let bfd_profile = raw.bfd_profile.as_ref().map(|name| {
            written.push("bfd_profile", self.loc(name));
            name.get_ref().clone()
        });
        let max_prefixes = self.max_prefixes(raw, field, &mut written);
        let families = match &raw.families {
            Some(list) => {
                written.push("families", self.loc(list));
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
            hold_time: timers.hold_time,
            keepalive_time: timers.keepalive_time,
            send_hold_time: timers.send_hold_time,
            minimum_hold_time: timers.minimum_hold_time,
            connect_time: timers.connect_time,
            ebgp_multihop: hops.ebgp_multihop,
            ttl_security: hops.ttl_security,
            passive,
            bfd_profile,
            max_prefixes,
            graceful_restart,
            families: families?,
            to_advertise,
            to_receive,
            sources: vec![self.source.path.to_path_buf()],
        };
        Some(NeighborFragment {
            field: field.to_string(),
            loc: self.loc(&raw.address),
            neighbor,
            field_locs: written.0,
            advertised,
        })
    }

    // ---- the peer ----

    /// The peer's unicast address.
    fn peer_address(&mut self, raw: &RawNeighbor, field: &str) -> Option<IpAddr> {
        let address = self.ip(&raw.address, &format!("{field}.address"))?;
        if address.is_unspecified() || address.is_multicast() {
            self.fail(
                &raw.address,
                &format!("{field}.address"),
                format!("{address} cannot be a BGP peer; give the peer's unicast address"),
            );
        }
        Some(address)
    }

    /// Exactly one of `asn` and `dynamic_asn`.
    fn remote_asn(
        &mut self,
        raw: &RawNeighbor,
        field: &str,
        header: &std::ops::Range<usize>,
        written: &mut Written,
    ) -> Option<RemoteAsn> {
        match (&raw.asn, &raw.dynamic_asn) {
            (Some(asn), None) => {
                written.push("asn", self.loc(asn));
                self.asn(asn, &format!("{field}.asn")).map(RemoteAsn::Fixed)
            }
            (None, Some(dynamic)) => {
                written.push("dynamic_asn", self.loc(dynamic));
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
                self.errors.push(self.source.error_at(header, field, "missing the peer's AS: set asn = <number> or dynamic_asn = \"internal\" | \"external\""));
                None
            }
        }
    }

    fn port(&mut self, raw: &RawNeighbor, field: &str, written: &mut Written) -> u16 {
        let Some(port) = &raw.port else { return DEFAULT_PORT };
        written.push("port", self.loc(port));
        self.int_in::<u16>(port, &format!("{field}.port"), 1..=65535, "TCP port")
            .unwrap_or(DEFAULT_PORT)
    }

    /// Our address for the session: of the neighbor's family.
    fn source_address(
        &mut self,
        raw: &RawNeighbor,
        field: &str,
        address: Option<IpAddr>,
        written: &mut Written,
    ) -> Option<IpAddr> {
        let text = raw.source_address.as_ref()?;
        written.push("source_address", self.loc(text));
        let name = format!("{field}.source_address");
        let source = self.ip(text, &name)?;
        match address {
            Some(address) if source.is_ipv4() != address.is_ipv4() => {
                self.fail(text, &name, format!("{source} and the neighbor address {address} are of different families; use an address of the same family"));
                None
            }
            _ => Some(source),
        }
    }

    // ---- the session ----

    /// Hold, keepalive and connect-retry times, `defaults` applied.
    fn session_timers(
        &mut self,
        raw: &RawNeighbor,
        field: &str,
        written: &mut Written,
        defaults: TimerDefaults,
    ) -> Timers {
        // RFC 4271 §4.2: Hold Time is zero or at least three seconds, in a 16-bit field of
        // seconds.
        let hold_time = raw.hold_time.as_ref().map(|hold| {
            written.push("hold_time", self.loc(hold));
            let name = format!("{field}.hold_time");
            let value = self.whole_seconds(hold, &name)?;
            if value == Duration::ZERO || (3..=65535).contains(&value.as_secs()) {
                Some(value)
            } else {
                self.fail(hold, &name, format!("\"{}\" is out of range; write \"0s\" (no keepalives) or \"3s\" to \"65535s\" (RFC 4271 §4.2)", format_duration(value)));
                None
            }
        });
        let keepalive = raw.keepalive_time.as_ref().map(|keepalive| {
            written.push("keepalive_time", self.loc(keepalive));
            let name = format!("{field}.keepalive_time");
            (keepalive, name.clone(), self.whole_seconds(keepalive, &name))
        });
        let hold_time = match (hold_time, &keepalive) {
            (Some(written), _) => written.unwrap_or(defaults.hold_time()),
            // MetalLB: a keepalive alone sets the hold time to three times it.
            (None, Some((keepalive, name, Some(value)))) if defaults == TimerDefaults::Upstream => {
                let hold = value.saturating_mul(3);
                if hold.as_secs() > 65535 {
                    self.fail(
                        *keepalive,
                        name,
                        format!(
                            "three times \"{}\" (the hold time derived from it) is more than \"65535s\"; set holdTime too",
                            format_duration(*value)
                        ),
                    );
                    defaults.hold_time()
                } else {
                    hold
                }
            }
            (None, _) => defaults.hold_time(),
        };

        // RFC 4271 §10: the suggested KeepaliveTime is one third of the Hold Time.
        let keepalive_time = keepalive
            .and_then(|(keepalive, name, value)| {
                let value = value?;
                if hold_time != Duration::ZERO && (value == Duration::ZERO || value >= hold_time) {
                    self.fail(
                        keepalive,
                        &name,
                        format!(
                            "must be at least \"1s\" and less than hold_time (\"{}\"); e.g. \"{}\"",
                            format_duration(hold_time),
                            format_duration(
                                default_keepalive(hold_time).max(Duration::from_secs(1))
                            )
                        ),
                    );
                    None
                } else {
                    Some(value)
                }
            })
            .unwrap_or_else(|| default_keepalive(hold_time));

        let connect_time = raw
            .connect_time
            .as_ref()
            .and_then(|connect| {
                written.push("connect_time", self.loc(connect));
                let name = format!("{field}.connect_time");
                let value = self.whole_seconds(connect, &name)?;
                if (1..=65535).contains(&value.as_secs()) {
                    Some(value)
                } else {
                    self.fail(connect, &name, "must be \"1s\" to \"65535s\"");
                    None
                }
            })
            .unwrap_or(defaults.connect_time());
        // RFC 9687: any whole number of seconds; "0s" turns the SendHoldTimer off.
        let send_hold_time = raw.send_hold_time.as_ref().and_then(|value| {
            written.push("send_hold_time", self.loc(value));
            self.whole_seconds_in(
                value,
                &format!("{field}.send_hold_time"),
                0..=u64::from(u32::MAX),
            )
        });
        let minimum_hold_time = raw
            .minimum_hold_time
            .as_ref()
            .and_then(|value| {
                written.push("minimum_hold_time", self.loc(value));
                self.whole_seconds_in(value, &format!("{field}.minimum_hold_time"), 0..=65535)
            })
            .unwrap_or(DEFAULT_MINIMUM_HOLD_TIME);
        Timers { hold_time, keepalive_time, send_hold_time, minimum_hold_time, connect_time }
    }

    /// `max_prefixes` and the settings that refine it (FRR `maximum-prefix N [threshold]
    /// [warning-only|restart M]`); those need `max_prefixes`.
    fn max_prefixes(
        &mut self,
        raw: &RawNeighbor,
        field: &str,
        written: &mut Written,
    ) -> Option<MaxPrefixes> {
        let threshold = raw.max_prefixes_threshold.as_ref().and_then(|value| {
            written.push("max_prefixes_threshold", self.loc(value));
            self.int_in::<u8>(value, &format!("{field}.max_prefixes_threshold"), 1..=100, "percent")
        });
        let warning_only = raw.max_prefixes_warning_only.as_ref().map(|value| {
            written.push("max_prefixes_warning_only", self.loc(value));
            *value.get_ref()
        });
        let restart_time = raw.max_prefixes_restart_time.as_ref().and_then(|value| {
            written.push("max_prefixes_restart_time", self.loc(value));
            self.whole_seconds_in(
                value,
                &format!("{field}.max_prefixes_restart_time"),
                1..=u64::from(u32::MAX),
            )
        });
        if let (Some(true), Some(value)) = (warning_only, &raw.max_prefixes_restart_time) {
            self.fail(
                value,
                &format!("{field}.max_prefixes_restart_time"),
                "cannot go with max_prefixes_warning_only = true, which never ends the session; remove one of them",
            );
        }
        let Some(value) = &raw.max_prefixes else {
            let needs = |name: &str| {
                format!("{name} needs max_prefixes; add max_prefixes = N to this neighbor")
            };
            if let Some(v) = &raw.max_prefixes_threshold {
                self.fail(
                    v,
                    &format!("{field}.max_prefixes_threshold"),
                    needs("max_prefixes_threshold"),
                );
            }
            if let Some(v) = &raw.max_prefixes_warning_only {
                self.fail(
                    v,
                    &format!("{field}.max_prefixes_warning_only"),
                    needs("max_prefixes_warning_only"),
                );
            }
            if let Some(v) = &raw.max_prefixes_restart_time {
                self.fail(
                    v,
                    &format!("{field}.max_prefixes_restart_time"),
                    needs("max_prefixes_restart_time"),
                );
            }
            return None;
        };
        written.push("max_prefixes", self.loc(value));
        let limit = self.int_in::<u32>(
            value,
            &format!("{field}.max_prefixes"),
            1..=i64::from(u32::MAX),
            "prefixes",
        )?;
        Some(MaxPrefixes {
            limit,
            threshold: threshold.unwrap_or(DEFAULT_MAX_PREFIXES_THRESHOLD),
            warning_only: warning_only.unwrap_or(false),
            restart_time,
        })
    }

    // ---- the transport ----

    /// `ebgp_multihop` (the TTL we send) and `ttl_security` (GTSM, the TTL we accept).
    fn hops(&mut self, raw: &RawNeighbor, field: &str, written: &mut Written) -> Hops {
        let ebgp_multihop = raw.ebgp_multihop.as_ref().and_then(|value| {
            written.push("ebgp_multihop", self.loc(value));
            match *value.get_ref() {
                BoolOrInt::Bool(true) => Some(255),
                BoolOrInt::Bool(false) => None,
                BoolOrInt::Int(ttl) => self.int_as(
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
            written.push("ttl_security", self.loc(value));
            let name = format!("{field}.ttl_security");
            let hops = match *value.get_ref() {
                BoolOrInt::Bool(true) => Some(1),
                BoolOrInt::Bool(false) => None,
                BoolOrInt::Int(hops) => self.int_as(value, hops, &name, 1..=254, "true (1 hop), false, or a hop count from 1 to 254"),
            }?;
            if let Some(ttl) = ebgp_multihop.filter(|ttl| *ttl > hops) {
                self.fail(value, &name, format!("ttl_security = {hops} accepts only peers within {hops} hop(s), but ebgp_multihop = {ttl} expects the peer up to {ttl} hops away; set ttl_security to at least {ttl} or lower ebgp_multihop (or remove one of them)"));
                return None;
            }
            Some(hops)
        });
        Hops { ebgp_multihop, ttl_security }
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
                let text = match self.source.read_secret_file(&path) {
                    Ok(text) => text,
                    Err(error) => {
                        self.fail(
                            file,
                            &name,
                            format!("{error}; point it at a readable file holding the TCP-MD5 key"),
                        );
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
}

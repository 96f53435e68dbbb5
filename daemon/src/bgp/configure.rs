//! The config as the BGP core takes it: a neighbor's settings turned into the FSM's config,
//! the transport's options, the RIB's import and export policies and the BFD session's spec.
//! The one place where `config` types become `bgp` types, so the cores never see the config.

use std::net::Ipv4Addr;
use std::time::Duration;

use super::fsm::{FsmConfig, RemoteAsn as FsmRemoteAsn, SendHoldTime};
use super::max_prefix::PrefixLimit;
use super::policy;
use super::transport::TransportOptions;
use super::wire::attributes::{Family, LargeCommunity};
use super::wire::open::GracefulRestart;
use crate::bfd::auth::Authentication;
use crate::bfd::runtime::{Hop, PeerSpec};
use crate::bfd::session::SessionConfig;
use crate::config::{
    AddressFamily, AdvertisePolicy, AllowMode, BfdProfile, Community, Config, GracefulRestartMode,
    Neighbor, RemoteAsn, Router,
};

/// Cap of the connect-retry backoff.
const CONNECT_RETRY_MAX: Duration = Duration::from_secs(60);

/// A configured community as the export policy attaches it.
pub fn community(configured: Community) -> policy::Community {
    match configured {
        Community::Standard(value) => policy::Community::Standard(value),
        Community::Large(global_admin, local_data1, local_data2) => {
            policy::Community::Large(LargeCommunity { global_admin, local_data1, local_data2 })
        }
    }
}

/// The BFD session a neighbor asks for with its `bfd_profile`, if any.
pub fn bfd_spec(n: &Neighbor, config: &Config) -> Result<Option<PeerSpec>, String> {
    let Some(name) = &n.bfd_profile else { return Ok(None) };
    let profile = config
        .bgp
        .bfd_profiles
        .iter()
        .find(|p| &p.name == name)
        .ok_or_else(|| format!("neighbor {}: no BFD profile {name:?}", n.address))?;
    bfd_peer(n, profile).map(Some)
}

/// The BFD session of a neighbor: single hop (RFC 5881) unless the neighbor is eBGP
/// multihop, then multihop (RFC 5883).
pub fn bfd_peer(n: &Neighbor, profile: &BfdProfile) -> Result<PeerSpec, String> {
    let auth = match &profile.authentication {
        None => None,
        // Validation has checked the key's length; a key that still does not fit must stop the
        // session rather than let it run unauthenticated.
        Some(config) => Some(Authentication::from_config(config).ok_or_else(|| {
            format!(
                "BFD profile {:?}: the key does not fit {}",
                profile.name,
                config.auth_type.name()
            )
        })?),
    };
    Ok(PeerSpec {
        peer: n.address,
        local: n.source_address,
        hop: if n.ebgp_multihop.is_some() { Hop::Multi } else { Hop::Single },
        config: SessionConfig {
            desired_min_tx: profile.transmit_interval,
            required_min_rx: profile.receive_interval,
            detect_mult: profile.detect_multiplier,
            passive: profile.passive_mode,
        },
        minimum_ttl: profile.minimum_ttl,
        profile: profile.name.clone(),
        auth,
    })
}

/// frr-k8s `toReceive` as the RIB's import policy.
pub fn import_policy(n: &Neighbor) -> policy::ImportPolicy {
    let to_receive = match n.to_receive.mode {
        AllowMode::All => policy::ReceiveFilter::All,
        AllowMode::Filtered => policy::ReceiveFilter::Filtered(
            n.to_receive
                .prefixes
                .iter()
                .map(|m| policy::PrefixListEntry { prefix: m.prefix, ge: m.ge, le: m.le })
                .collect(),
        ),
    };
    policy::ImportPolicy { to_receive }
}

/// frr-k8s `toAdvertise.allowed` as the RIB's prefix filter.
pub fn advertise_filter(a: &AdvertisePolicy) -> policy::AdvertiseFilter {
    match a.mode {
        AllowMode::All => policy::AdvertiseFilter::All,
        AllowMode::Filtered if a.prefixes.is_empty() => policy::AdvertiseFilter::None,
        AllowMode::Filtered => {
            policy::AdvertiseFilter::Filtered(a.prefixes.iter().copied().collect())
        }
    }
}

/// frr-k8s `toAdvertise` as the RIB's export policy.
pub fn export_policy(n: &Neighbor) -> policy::ExportPolicy {
    let a = &n.to_advertise;
    policy::ExportPolicy {
        to_advertise: advertise_filter(a),
        with_local_pref: a
            .with_local_pref
            .iter()
            .map(|r| policy::LocalPrefRule {
                local_pref: r.local_pref,
                prefixes: r.prefixes.iter().copied().collect(),
            })
            .collect(),
        with_community: a
            .with_community
            .iter()
            .map(|r| policy::CommunityRule {
                community: community(r.community),
                prefixes: r.prefixes.iter().copied().collect(),
            })
            .collect(),
    }
}

pub fn families(n: &Neighbor) -> Vec<Family> {
    n.families
        .iter()
        .map(|f| match f {
            AddressFamily::Ipv4Unicast => Family::IPV4_UNICAST,
            AddressFamily::Ipv6Unicast => Family::IPV6_UNICAST,
        })
        .collect()
}

/// Our side of graceful restart for one router (RFC 4724 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Restart {
    /// The Restart Time we advertise.
    pub restart_time: Duration,
    /// This run started with the previous run's routes still in the kernel (the R bit): it
    /// is a restart, not a fresh start.
    pub restarted: bool,
}

/// The Graceful Restart capability of a neighbor (RFC 4724 §3). With `graceful_restart`: the
/// R bit after a restart, and the F bit for every family, since uplink keeps its kernel
/// routes across a restart (the FIB removes them only after the peers' End-of-RIB). As a
/// helper only: no family, which says we keep a restarting peer's routes.
pub fn graceful_restart_capability(n: &Neighbor, restart: Restart) -> Option<GracefulRestart> {
    match n.graceful_restart {
        GracefulRestartMode::Disabled => None,
        GracefulRestartMode::Helper => Some(GracefulRestart {
            restart_state: false,
            notification: false,
            restart_time: 0,
            families: Vec::new(),
        }),
        GracefulRestartMode::Enabled => Some(GracefulRestart {
            restart_state: restart.restarted,
            notification: false,
            restart_time: u16::try_from(restart.restart_time.as_secs()).unwrap_or(u16::MAX),
            families: families(n).into_iter().map(|f| (f, true)).collect(),
        }),
    }
}

pub fn fsm_config(
    router: &Router,
    n: &Neighbor,
    router_id: Ipv4Addr,
    index: u64,
    restart: Restart,
) -> FsmConfig {
    FsmConfig {
        local_asn: router.asn,
        local_id: router_id,
        remote_asn: match n.remote_asn {
            RemoteAsn::Fixed(asn) => FsmRemoteAsn::Fixed(asn),
            RemoteAsn::Internal => FsmRemoteAsn::Internal,
            RemoteAsn::External => FsmRemoteAsn::External,
        },
        hold_time: n.hold_time,
        keepalive_time: n.keepalive_time,
        minimum_hold_time: n.minimum_hold_time,
        send_hold_time: match n.send_hold_time {
            None => SendHoldTime::TwiceHoldTime,
            Some(d) if d.is_zero() => SendHoldTime::Off,
            Some(d) => SendHoldTime::Fixed(d),
        },
        connect_retry: n.connect_time,
        connect_retry_max: CONNECT_RETRY_MAX.max(n.connect_time),
        passive: n.passive,
        families: families(n),
        graceful_restart: graceful_restart_capability(n, restart),
        // Different seeds per neighbor so their retries do not march in step.
        jitter_seed: u64::from(u32::from(router_id)) ^ (index.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
    }
}

/// The neighbor's `max_prefixes` settings as the RIB task counts them.
pub fn prefix_limit(n: &Neighbor) -> Option<PrefixLimit> {
    n.max_prefixes.map(|m| PrefixLimit {
        limit: m.limit,
        threshold_percent: m.threshold,
        warning_only: m.warning_only,
        restart_time: m.restart_time,
    })
}

pub fn transport_options(n: &Neighbor, vrf: &str) -> TransportOptions {
    let external = !matches!(n.remote_asn, RemoteAsn::Internal);
    // RFC 5082 §3: with GTSM send 255 and accept only TTL ≥ 256 - hops. Without it, eBGP
    // peers are one hop away (TTL 1) unless multihop says otherwise; iBGP uses 255.
    let (ttl, min_ttl) = match (n.ttl_security, n.ebgp_multihop) {
        (Some(hops), _) => (255, Some(255u8.saturating_sub(hops).saturating_add(1))),
        (None, Some(ttl)) => (ttl, None),
        (None, None) if external => (1, None),
        (None, None) => (255, None),
    };
    TransportOptions {
        source: n.source_address,
        ttl,
        min_ttl,
        md5_key: n.password.as_ref().map(|p| p.expose().as_bytes().to_vec()),
        device: (!vrf.is_empty()).then(|| vrf.to_string()),
    }
}

//! Requests and responses on the control socket: one JSON object per line each way.

use serde::{Deserialize, Serialize};

pub use crate::bgp::session::ClearHow;

/// Which routing instances a `show` covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum VrfSelector {
    /// The default VRF.
    #[default]
    Default,
    Named(String),
    All,
}

impl VrfSelector {
    /// `--vrf NAME|all|default` as typed on the command line.
    pub fn parse(arg: Option<&str>) -> Self {
        match arg {
            None | Some("") | Some("default") => Self::Default,
            Some("all") => Self::All,
            Some(name) => Self::Named(name.to_string()),
        }
    }

    /// Whether the instance of `vrf` ("" is the default VRF) is selected.
    pub fn matches(&self, vrf: &str) -> bool {
        match self {
            Self::Default => vrf.is_empty(),
            Self::Named(name) => name == vrf,
            Self::All => true,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FamilyArg {
    Ipv4,
    Ipv6,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "kebab-case")]
pub enum Request {
    BgpSummary {
        vrf: VrfSelector,
    },
    BgpNeighbors {
        vrf: VrfSelector,
        address: Option<String>,
    },
    BgpRoutes {
        vrf: VrfSelector,
        family: Option<FamilyArg>,
        prefix: Option<String>,
    },
    /// `show bgp [ipv4|ipv6] neighbors ADDR advertised-routes|received-routes`: what the
    /// neighbor was sent, or what uplink holds from it.
    BgpNeighborRoutes {
        vrf: VrfSelector,
        address: String,
        family: FamilyArg,
        received: bool,
    },
    /// `show bfd peers`: every BFD session of the selected instances, as one list.
    BfdPeers {
        vrf: VrfSelector,
    },
    // `show announcements` and `show running-config`, answered by `control::announcements`.
    Announcements {
        vrf: VrfSelector,
    },
    RunningConfig,
    /// `show kubernetes`: the API server, each kind's watch, the objects refused.
    Kubernetes,
    /// `show l2`: layer 2 mode's membership, who answers for each address and why.
    L2,
    /// The routes the FIB writer holds for the kernel, with their state.
    Fib {
        vrf: VrfSelector,
    },
    /// `uplink drain`: GRACEFUL_SHUTDOWN on everything the node originates, then, after
    /// `drain_time`, the service addresses withdrawn (RFC 8326). With `wait`, answered after
    /// the withdrawal. Sessions stay up. With `shutdown`, a drain before the node goes away:
    /// not recorded, and the daemon's stop ends the sessions instead of a graceful restart.
    Drain {
        #[serde(default)]
        wait: bool,
        #[serde(default)]
        shutdown: bool,
    },
    /// `uplink undrain`: everything announced again, without GRACEFUL_SHUTDOWN.
    Undrain,
    /// `uplink wait-ready`: per configured session, whether it is Established and End-of-RIB
    /// went both ways (RFC 4724 §2).
    Ready,
    /// `uplink reload`: re-read the config, apply what changed, answer with what was done
    /// (`reload::ReloadOutcome`), or why the config was rejected.
    Reload,
    /// `uplink clear bgp ADDR|* [soft [in|out]]`: reset sessions (Cease/Administrative
    /// Reset) or exchange their routes again (ROUTE-REFRESH, RFC 2918).
    ClearBgp {
        vrf: VrfSelector,
        /// `None`: every neighbor of the selected instances (`*`).
        address: Option<String>,
        how: ClearHow,
    },
}

/// One request line as a client sent it (JSON, the newline optional) → the request, or the
/// error the client is answered with.
pub fn parse_request(line: &[u8]) -> Result<Request, String> {
    serde_json::from_slice::<Request>(line).map_err(|e| format!("bad request: {e}"))
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Response {
    Ok(serde_json::Value),
    Error(String),
}

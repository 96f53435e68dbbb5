//! Config files → a validated, merged model.
//!
//! The daemon reads `/etc/uplink/uplink.toml` and then every `*.toml`, `*.yaml` and `*.yml` in
//! `/etc/uplink/conf.d/`, in sorted file-name order ([`load`]). YAML files hold Kubernetes
//! manifests (frr-k8s, MetalLB, OVN-Kubernetes kinds) that are translated onto the same TOML
//! structures (`manifest`); the announcement sections are in `announce`. TOML field names are
//! the snake_case of frr-k8s's `FRRConfiguration.spec.bgp` fields. Each file is parsed with
//! spans (`raw`), validated on its own with defaults applied (`validate`), and the files are
//! then merged (`merge`). Every error names the file, line, column and dotted field path, and
//! says what would be valid ([`ConfigError`]); all errors across all files are returned
//! together ([`ConfigErrors`]).
//!
//! # Merge rule
//!
//! frr-k8s merges FRRConfigurations so that "configs only extend each other": more neighbors,
//! more prefixes, more permissive filters; any contradiction rejects the new configuration whole
//! and the old one stays (seed deck, slide 76; frr-k8s `internal/controller/merge.go`). Here:
//!
//! - **Routers** are identified by `vrf` (`""` is the default VRF). A different `asn` is a
//!   conflict. `id`, `maximum_paths`, `multipath_relax`, `install`, `table` and `metric` follow
//!   frr-k8s's router-id rule: a file
//!   that leaves one out takes the other file's value; two different explicit values conflict.
//!   `prefixes` are unioned. Two routers with one `vrf` in the same file is an error.
//! - **Neighbors** are identified by `address` within a router (frr-k8s keys them by address and
//!   port; here a different `port` for one address is a conflict instead, since one router keeps
//!   one session per peer address). All session settings — `asn`/`dynamic_asn`, `port`,
//!   `source_address`, password, `hold_time`, `keepalive_time`, `connect_time`, `ebgp_multihop`,
//!   `ttl_security`, `passive`, `bfd_profile`, `max_prefixes`, `families` — must be equal *after
//!   defaults are applied*, as frr-k8s compares them (leaving `port` out equals writing 179).
//!   Filters are unioned, preferring "the filter that allows more routes": `mode = "all"` in either
//!   file wins for `to_advertise` and for `to_receive`; prefix lists, `with_community` lists are
//!   unioned; one prefix with two different `local_pref`s for one neighbor is a conflict.
//! - **BFD profiles** are identified by `name`; identical copies are fine, different settings under
//!   one name conflict (as in frr-k8s); one name twice in one file is an error.
//! - **`always_block`** is unioned.
//! - **`[fib] nexthop_objects`** and **`[metrics] listen`** are node-wide: files that set them
//!   must agree.
//!
//! A conflict error points at the later file and names the earlier file, line and column.
//! Cross-references are checked on the merged result, so a fragment may use a BFD profile or a
//! router prefix defined in another file: every prefix under a neighbor's `to_advertise` must be
//! one of its router's `prefixes`, prefixes given a `local_pref` or community must also be
//! advertised to that neighbor, and `bfd_profile` must name a defined profile. These checks are
//! skipped while other errors exist, so a value already rejected does not also show as dangling.
//!
//! Defaults: `port` 179, `hold_time` 90s, `keepalive_time` hold/3, `connect_time` 5s (in TOML
//! files; a manifest's neighbor gets MetalLB's and frr-k8s's 180s, 60s and 120s, see
//! `validate::TimerDefaults`),
//! `maximum_paths` 64, `multipath_relax` true, `install` true, `table` none (main for the default
//! VRF, the VRF device's table otherwise), `metric` 20 (FRR's), `families` the family of `address`, filters
//! `mode = "filtered"` with nothing listed (send and accept nothing). BFD: intervals 300ms, echo
//! 50ms, `detect_multiplier` 3, `minimum_ttl` 254. `password_file` is read at load time, relative
//! to the directory of the file that names it, with one trailing newline removed.

pub mod announce;
mod bfd_auth;
mod check;
pub mod community;
mod desired_state;
pub mod digest;
pub mod duration;
mod error;
mod load;
mod manifest;
mod merge;
mod model;
pub mod neighbor_settings;
pub mod network;
mod network_validate;
pub mod node_values;
mod raw;
pub mod selector;
mod shared;
mod source;
mod validate;
pub(crate) use validate::DEFAULT_METRIC;

pub use error::{ConfigError, ConfigErrors};
pub use load::{
    config_files, is_api_source, is_fragment_name, load, load_sources, load_sources_kept, load_str,
    load_with, load_with_api, ApiObjects, Source, API_SOURCE_PREFIX, DEFAULT_CONFIG_PATH,
    FRAGMENT_DIR,
};
pub use manifest::{says_network_unavailable, ManifestCache, NETWORK_UNAVAILABLE};
pub use model::vrf_display_name;
pub use model::{
    AddressFamily, AdvertisePolicy, AllowMode, BfdProfile, BgpConfig, CommunityPrefixes, Config,
    FibConfig, GracefulRestartConfig, GracefulRestartMode, KubernetesConfig, Layer2Config,
    LocalPrefPrefixes, MaxPrefixes, MetricNamespaces, MetricsConfig, Neighbor, Password,
    PrefixMatch, ReceivePolicy, RemoteAsn, Router, SkippedDocument,
};

pub use bfd_auth::{BfdAuthType, BfdAuthentication};
pub use community::Community;

//! The announcement sections of a config file — `[node]`, `[[pools]]`, `[[services]]`,
//! `[[advertisements]]`, `[[communities]]`, `[[networks]]`, `[[route_advertisements]]` — as
//! written (`Raw*`, with spans), validated per file (`validate`), and merged across files
//! (`merge`) into [`AnnounceConfig`].
//!
//! Merge rule, as for the BGP sections (frr-k8s: configs only extend each other):
//! - `[node]`: `name` is adopted from whichever file sets it; two different names conflict.
//!   `labels` are unioned; one key with two values conflicts.
//! - pools, services (by `namespace/name`), advertisements, communities, route advertisements
//!   and named peers: identical copies are fine, different definitions under one name conflict.
//! - networks (by `name`) extend each other field by field, so a manifest can define a
//!   ClusterUserDefinedNetwork and a TOML fragment add this node's `host_subnet` and
//!   `egress_ips`: `topology`, `subnet` and `vrf` are adopted or conflict, `host_subnet` and
//!   `egress_ips` and `labels` are unioned.
//!
//! After merging, community aliases are resolved and networks are checked for completeness.

//!
//! Modules, as for the BGP sections: [`model`] (the validated values), `raw` (as written, with
//! spans), `validate` (one file → a fragment), `merge` (fragments → [`AnnounceConfig`]).

mod merge;
pub mod model;
mod raw;
#[cfg(test)]
mod tests;
mod validate;

pub(crate) use merge::merge;
pub use model::*;
pub(crate) use raw::*;
pub(crate) use validate::{validate, AnnounceFragment, Placed};

use std::time::Duration;

pub(crate) const DEFAULT_HEALTH_INTERVAL: Duration = Duration::from_secs(5);
pub(crate) const DEFAULT_HEALTH_TIMEOUT: Duration = Duration::from_secs(2);
pub(crate) const DEFAULT_RISE: u32 = 2;
pub(crate) const DEFAULT_FALL: u32 = 3;

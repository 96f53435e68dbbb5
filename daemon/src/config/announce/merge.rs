//! The announcement fragments of all files → one [`AnnounceConfig`] (the merge rule is in the
//! module documentation of `config::announce`).

use std::collections::BTreeMap;
use std::hash::BuildHasher;
use std::path::PathBuf;
use std::sync::Arc;

use hashbrown::HashTable;

use super::model::*;
use super::validate::{AnnounceFragment, NetworkFragment, PendingAdvertisement, Placed};
use std::str::FromStr;

use crate::config::community::Community;
use crate::config::error::ConfigError;

/// Merges the announcement fragments of all files, in order.
pub(crate) fn merge(
    fragments: Vec<(PathBuf, AnnounceFragment)>,
    errors: &mut Vec<ConfigError>,
) -> AnnounceConfig {
    let mut out = AnnounceConfig::default();
    let mut node_name: Option<Placed<String>> = None;
    let mut node_labels: BTreeMap<String, Placed<String>> = BTreeMap::new();
    let mut pools: ByName<Pool> = ByName::default();
    let mut services: ByName<Arc<Service>> = ByName::default();
    let mut advertisements: ByName<PendingAdvertisement> = ByName::default();
    let mut l2_advertisements: ByName<L2Advertisement> = ByName::default();
    let mut communities: ByName<CommunityAlias> = ByName::default();
    let mut networks: Vec<(Placed<NetworkFragment>, Vec<PathBuf>)> = Vec::new();
    let mut route_advertisements: ByName<RouteAdvertisement> = ByName::default();
    let mut peer_names: ByName<PeerName> = ByName::default();
    for (file, mut fragment) in fragments {
        if let Some(name) = fragment.node_name {
            match &node_name {
                Some(first) if first.item != name.item => errors.push(name.loc.error(
                    name.field.to_string(),
                    format!(
                        "node name \"{}\" conflicts with \"{}\" at {}; one node has one name",
                        name.item, first.item, first.loc
                    ),
                )),
                Some(_) => {}
                None => node_name = Some(name),
            }
        }
        for label in fragment.node_labels {
            let (key, value) = label.item.clone();
            match node_labels.get(&key) {
                Some(first) if first.item != value => errors.push(label.loc.error(
                    label.field.to_string(),
                    format!(
                        "node label {key}={value} conflicts with {key}={} at {}",
                        first.item, first.loc
                    ),
                )),
                Some(_) => {}
                None => {
                    node_labels
                        .insert(key, Placed { item: value, loc: label.loc, field: label.field });
                }
            }
        }
        merge_identical(
            &mut pools,
            fragment.pools,
            |p, key| key.push_str(&p.name),
            |p| Some(&mut p.sources),
            "pool",
            errors,
        );
        // The API's Services come last, as one list of one Service per object and so per
        // name (`config/load.rs`): with no Service from the files, nothing can conflict with
        // them, and their ten thousand names are not hashed at every change.
        let named_once = file.as_os_str() == crate::config::API_SOURCE_PREFIX;
        if !(named_once && services.take_whole(&mut fragment.services)) {
            merge_identical(
                &mut services,
                fragment.services,
                |s, key| key.push_str(&s.key),
                |s| Some(&mut Arc::make_mut(s).sources),
                "service",
                errors,
            );
        }
        merge_identical(
            &mut advertisements,
            fragment.advertisements,
            |a, key| key.push_str(&a.advertisement.name),
            |a| Some(&mut a.advertisement.sources),
            "advertisement",
            errors,
        );
        merge_identical(
            &mut l2_advertisements,
            fragment.l2_advertisements,
            |a, key| key.push_str(&a.name),
            |a| Some(&mut a.sources),
            "L2 advertisement",
            errors,
        );
        merge_identical(
            &mut communities,
            fragment.communities,
            |c, key| key.push_str(&c.name),
            |_| None,
            "community",
            errors,
        );
        merge_identical(
            &mut route_advertisements,
            fragment.route_advertisements,
            |r, key| key.push_str(&r.name),
            |r| Some(&mut r.sources),
            "route advertisement",
            errors,
        );
        merge_identical(
            &mut peer_names,
            fragment.peer_names,
            |p, key| key.push_str(&p.name),
            |_| None,
            "BGP peer",
            errors,
        );
        for network in fragment.networks {
            match networks.iter_mut().find(|(n, _)| n.item.name == network.item.name) {
                Some((existing, sources)) => {
                    extend_network(existing, network, errors);
                    if !sources.contains(&file) {
                        sources.push(file.clone());
                    }
                }
                None => networks.push((network, vec![file.clone()])),
            }
        }
        out.router_labels.extend(fragment.router_labels);
    }
    out.node.name = node_name.map(|n| n.item);
    out.node.labels = node_labels.into_iter().map(|(k, v)| (k, v.item)).collect();
    out.pools = pools.into_items();
    out.services = services.into_items();
    out.communities = communities.into_items();
    out.l2_advertisements = l2_advertisements.into_items();
    out.route_advertisements = route_advertisements.into_items();
    out.peer_names = peer_names.into_items();
    for placed in advertisements.placed {
        let mut adv = placed.item.advertisement;
        for (text, loc, field) in placed.item.communities {
            // MetalLB: a community is a literal value or the name of a Community alias.
            if let Some(alias) = out.communities.iter().find(|c| c.name == text) {
                adv.communities.push(alias.value);
                continue;
            }
            match Community::from_str(&text) {
                Ok(value) => adv.communities.push(value),
                Err(error) => errors.push(loc.error(
                    field,
                    format!("neither a [[communities]] alias nor a community value: {error}"),
                )),
            }
        }
        out.advertisements.push(adv);
    }
    for (placed, sources) in networks {
        let n = placed.item;
        let Some(topology) = n.topology else {
            errors.push(placed.loc.error(format!("{}.topology", placed.field), format!("network \"{}\" has no topology in any file; set topology = \"layer3\" or \"layer2\"", n.name)));
            continue;
        };
        for host in &n.host_subnets {
            if topology == Topology::Layer2 {
                errors.push(placed.loc.error(format!("{}.host_subnet", placed.field), format!("network \"{}\" is layer2: every node announces the whole subnet, so it has no host_subnet", n.name)));
            } else if !n.subnets.iter().any(|s| s.contains(host)) {
                errors.push(placed.loc.error(
                    format!("{}.host_subnet", placed.field),
                    format!(
                        "host_subnet {host} is not inside the subnet of network \"{}\"",
                        n.name
                    ),
                ));
            }
        }
        let vrf = n.vrf.unwrap_or_else(|| {
            if n.name == DEFAULT_NETWORK {
                String::new()
            } else {
                n.name.clone()
            }
        });
        out.networks.push(Network {
            name: n.name,
            labels: n.labels,
            topology,
            subnets: n.subnets,
            host_subnets: n.host_subnets,
            vrf,
            egress_ips: n.egress_ips,
            sources: sources.iter().map(|s| Arc::from(s.as_path())).collect(),
        });
    }
    out
}

/// What merged under one kind of name: the items in first-seen order, and where each name is
/// (a cluster's thousands of Services would make a search of the list quadratic).
struct ByName<T> {
    placed: Vec<Placed<T>>,
    /// The places in `placed`, by the hash of their item's name: a name is looked up from a
    /// buffer it is written into, where a map keyed by names made a String of every Service's
    /// key at every change (with the map's inserts, a fourteenth of the daemon's work).
    index: HashTable<usize>,
    /// foldhash, not SipHash: every Service of the cluster is keyed here at every change.
    hasher: foldhash::fast::RandomState,
    /// How many of `placed` are in `index`: a list taken whole ([`ByName::take_whole`]) is
    /// indexed when another one is merged after it.
    indexed: usize,
}

impl<T> Default for ByName<T> {
    fn default() -> Self {
        ByName {
            placed: Vec::new(),
            index: HashTable::new(),
            hasher: Default::default(),
            indexed: 0,
        }
    }
}

impl<T> ByName<T> {
    /// Takes `new`, a list that names each item once, as the whole of an empty set; false
    /// (and `new` left as it is) when the set has items already.
    fn take_whole(&mut self, new: &mut Vec<Placed<T>>) -> bool {
        if !self.placed.is_empty() {
            return false;
        }
        self.placed = std::mem::take(new);
        true
    }

    fn into_items(self) -> Vec<T> {
        // Made at its size, not collected in place: the list would keep the room of the
        // placed items (each with its file and field) and their growth, at 2,000 Services
        // 3 MB the running config holds for nothing (a heap profile of the Kubernetes
        // benchmark); and shrunk in place, a heap profile still found it at that room.
        let mut items: Vec<T> = Vec::with_capacity(self.placed.len());
        items.extend(self.placed.into_iter().map(|p| p.item));
        items
    }
}

/// Identical copies merge (their sources add up); different definitions under one name conflict.
/// `key` writes an item's name into the (cleared) buffer it is given.
fn merge_identical<T: Clone + PartialEq>(
    merged: &mut ByName<T>,
    new: Vec<Placed<T>>,
    key: impl Fn(&T, &mut String),
    sources: fn(&mut T) -> Option<&mut Sources>,
    what: &str,
    errors: &mut Vec<ConfigError>,
) {
    let ByName { placed, index, hasher, indexed } = merged;
    let name_of = |item: &T, buffer: &mut String| {
        buffer.clear();
        key(item, buffer);
    };
    let hash_at = |placed: &[Placed<T>], at: usize| {
        let mut name = String::new();
        if let Some(p) = placed.get(at) {
            name_of(&p.item, &mut name);
        }
        hasher.hash_one(name.as_str())
    };
    // A list taken whole named each item once.
    for at in *indexed..placed.len() {
        index.insert_unique(hash_at(placed, at), at, |&at| hash_at(placed, at));
    }
    // Made at their size: the API's Services come as one list of thousands at every change.
    placed.reserve(new.len());
    index.reserve(new.len(), |&at| hash_at(placed, at));
    let (mut name, mut other) = (String::new(), String::new());
    for item in new {
        name_of(&item.item, &mut name);
        let hash = hasher.hash_one(name.as_str());
        let same_name = |&at: &usize| {
            placed.get(at).is_some_and(|p| {
                name_of(&p.item, &mut other);
                other == name
            })
        };
        let Some(&at) = index.find(hash, same_name) else {
            index.insert_unique(hash, placed.len(), |&at| hash_at(placed, at));
            placed.push(item);
            continue;
        };
        let Some(first) = placed.get_mut(at) else { continue };
        let mut a = first.item.clone();
        let mut b = item.item.clone();
        let new_sources = sources(&mut b).map(std::mem::take).unwrap_or_default();
        if let Some(s) = sources(&mut a) {
            s.clear();
        }
        if a == b {
            if let Some(s) = sources(&mut first.item) {
                for source in new_sources {
                    if !s.contains(&source) {
                        s.push(source);
                    }
                }
            }
        } else {
            errors.push(item.loc.error(
                format!("{}.name", item.field),
                format!("{what} \"{name}\" is also defined at {} ({}) with different settings; definitions with one name must be identical — make them equal or rename one", first.loc, first.field),
            ));
        }
    }
    *indexed = placed.len();
}

fn extend_network(
    existing: &mut Placed<NetworkFragment>,
    new: Placed<NetworkFragment>,
    errors: &mut Vec<ConfigError>,
) {
    let name = existing.item.name.clone();
    let conflict = |errors: &mut Vec<ConfigError>, what: &str, a: String, b: String| {
        errors.push(new.loc.error(
            format!("{}.{what}", new.field),
            format!(
                "network \"{name}\" has {what} {b} here but {a} at {} ({})",
                existing.loc, existing.field
            ),
        ));
    };
    let n = new.item.clone();
    match (existing.item.topology, n.topology) {
        (Some(a), Some(b)) if a != b => {
            conflict(errors, "topology", format!("{a:?}"), format!("{b:?}"))
        }
        (None, Some(b)) => existing.item.topology = Some(b),
        _ => {}
    }
    if !n.subnets.is_empty() {
        if existing.item.subnets.is_empty() {
            existing.item.subnets = n.subnets;
        } else if existing.item.subnets != n.subnets {
            conflict(
                errors,
                "subnet",
                format!("{:?}", existing.item.subnets),
                format!("{:?}", n.subnets),
            );
        }
    }
    match (&existing.item.vrf, &n.vrf) {
        (Some(a), Some(b)) if a != b => conflict(errors, "vrf", a.clone(), b.clone()),
        (None, Some(b)) => existing.item.vrf = Some(b.clone()),
        _ => {}
    }
    for host in n.host_subnets {
        if !existing.item.host_subnets.contains(&host) {
            existing.item.host_subnets.push(host);
        }
    }
    for ip in n.egress_ips {
        if !existing.item.egress_ips.contains(&ip) {
            existing.item.egress_ips.push(ip);
        }
    }
    for (k, v) in n.labels {
        existing.item.labels.entry(k).or_insert(v);
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::error::Loc;

    fn placed(name: &str, value: u8, file: &str) -> Placed<(String, u8)> {
        Placed {
            item: (name.to_string(), value),
            loc: Loc::file(Path::new(file)),
            field: "x".into(),
        }
    }

    fn merged(set: &mut ByName<(String, u8)>, new: Vec<Placed<(String, u8)>>) -> Vec<ConfigError> {
        let mut errors = Vec::new();
        let key = |item: &(String, u8), buffer: &mut String| buffer.push_str(&item.0);
        merge_identical(set, new, key, |_| None, "thing", &mut errors);
        errors
    }

    /// A list taken whole is found by the merges after it: the same name defined otherwise
    /// conflicts, defined alike merges.
    #[test]
    fn a_list_taken_whole_is_looked_up_by_the_next_merge() {
        let mut set = ByName::default();
        let mut whole = vec![placed("a", 1, "api"), placed("b", 2, "api")];
        assert!(set.take_whole(&mut whole));
        assert!(!set.take_whole(&mut vec![placed("c", 3, "api")]), "the set had items");
        let errors = merged(&mut set, vec![placed("b", 9, "late"), placed("a", 1, "late")]);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].message.contains("\"b\" is also defined at api"), "{errors:?}");
        assert!(merged(&mut set, vec![placed("c", 3, "later")]).is_empty());
        let errors = merged(&mut set, vec![placed("c", 4, "last")]);
        assert!(errors[0].message.contains("\"c\" is also defined at later"), "{errors:?}");
        let names: Vec<String> = set.into_items().into_iter().map(|(name, _)| name).collect();
        assert_eq!(names, ["a", "b", "c"]);
    }
}

//! What layer 2 mode's membership reads from the API when `[layer2]` leaves it there: every
//! Node's `InternalIP` addresses, the members to join by (without `[layer2] members`), and the
//! key of MetalLB's `memberlist` Secret (`secretkey`, in `[kubernetes] namespace`; without
//! `[layer2] secret_file`) — how MetalLB's speakers find each other and their key. Published
//! together on the channel the layer 2 runtime follows; what was read stays while the API is
//! away. Nothing is watched until the running config asks for it: a cluster that does not use
//! layer 2 mode, or lists its members, is not watched for its Nodes by every node.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use futures_lite::StreamExt;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::Client;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::config::Config;
use crate::l2::runtime::FromApi;

/// MetalLB's memberlist Secret and its key.
pub const SECRET_NAME: &str = "memberlist";
pub const SECRET_KEY: &str = "secretkey";

/// The shortest key taken from the Secret, as from `[layer2] secret_file`.
const MIN_KEY: usize = 16;

type Publish = Arc<watch::Sender<Arc<FromApi>>>;

/// Watches the Nodes and the Secret once the running config's `[layer2]` needs them, and
/// publishes what they say on `publish`.
pub(super) fn spawn(
    client: Client,
    namespace: &str,
    mut running: watch::Receiver<Arc<Config>>,
    publish: watch::Sender<Arc<FromApi>>,
) {
    let publish = Arc::new(publish);
    let namespace = namespace.to_string();
    tokio::spawn(async move {
        let (mut nodes, mut secret) = (false, false);
        loop {
            let wants = running
                .borrow_and_update()
                .layer2
                .as_ref()
                .map(|layer2| (layer2.members.is_empty(), layer2.secret.is_empty()));
            let (want_nodes, want_secret) = wants.unwrap_or_default();
            if want_nodes && !nodes {
                nodes = true;
                info!("layer 2: the members to join by are the API's Nodes");
                tokio::spawn(watch_nodes(Api::all(client.clone()), publish.clone()));
            }
            if want_secret && !secret {
                secret = true;
                info!(namespace = %namespace, "layer 2: the membership's key is the Secret {namespace}/{SECRET_NAME}");
                let api = Api::namespaced(client.clone(), &namespace);
                tokio::spawn(watch_secret(api, namespace.clone(), publish.clone()));
            }
            if (nodes && secret) || running.changed().await.is_err() {
                return;
            }
        }
    });
}

/// Changes what is published, waking the runtime only when it changed.
fn update(publish: &Publish, change: impl FnOnce(&mut FromApi)) {
    publish.send_if_modified(|current| {
        let mut next = FromApi::clone(current);
        change(&mut next);
        let changed = next != **current;
        if changed {
            *current = Arc::new(next);
        }
        changed
    });
}

async fn watch_nodes(api: Api<Node>, publish: Publish) {
    let mut stream = watcher::watcher(api, watcher::Config::default()).default_backoff().boxed();
    let mut listing = BTreeMap::new();
    let mut failing = false;
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Init) => listing.clear(),
            Ok(Event::InitApply(node)) => listing.extend(addresses(&node)),
            Ok(Event::InitDone) => {
                let nodes = std::mem::take(&mut listing);
                update(&publish, |api| {
                    api.nodes = nodes;
                    api.nodes_listed = true;
                });
            }
            Ok(Event::Apply(node)) => {
                if let Some((name, addresses)) = addresses(&node) {
                    update(&publish, |api| {
                        api.nodes.insert(name, addresses);
                    });
                }
            }
            Ok(Event::Delete(node)) => {
                if let Some(name) = node.metadata.name {
                    update(&publish, |api| {
                        api.nodes.remove(&name);
                    });
                }
            }
            // Tried again with back-off; the Nodes read stay the members meanwhile.
            Err(e) => {
                if !failing {
                    warn!("layer 2: cannot watch the Nodes (the members stay as read): {e}");
                }
                failing = true;
                continue;
            }
        }
        failing = false;
    }
}

/// A Node's name and `InternalIP` addresses.
fn addresses(node: &Node) -> Option<(String, Vec<IpAddr>)> {
    let name = node.metadata.name.clone()?;
    let listed = node.status.as_ref().and_then(|s| s.addresses.as_ref());
    let internal = listed.into_iter().flatten().filter(|a| a.type_ == "InternalIP");
    Some((name, internal.filter_map(|a| a.address.parse().ok()).collect()))
}

async fn watch_secret(api: Api<Secret>, namespace: String, publish: Publish) {
    let config = watcher::Config::default().fields(&format!("metadata.name={SECRET_NAME}"));
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    let missing = format!("no Secret {namespace}/{SECRET_NAME} with the key the nodes share");
    let mut listed = None;
    while let Some(event) = stream.next().await {
        let key = match event {
            Ok(Event::Init) => {
                listed = None;
                continue;
            }
            Ok(Event::InitApply(secret)) => {
                listed = Some(key_of(&secret, &namespace));
                continue;
            }
            Ok(Event::InitDone) => listed.take().unwrap_or_else(|| Err(missing.clone())),
            Ok(Event::Apply(secret)) => key_of(&secret, &namespace),
            Ok(Event::Delete(_)) => {
                Err(format!("the Secret {namespace}/{SECRET_NAME} was deleted"))
            }
            // A key read before stays; without one, the membership says why it waits.
            Err(e) => {
                let why = format!("cannot read the Secret {namespace}/{SECRET_NAME}: {e}");
                update(&publish, |api| {
                    if api.key.is_err() {
                        api.key = Err(why);
                    }
                });
                continue;
            }
        };
        if let Err(why) = &key {
            warn!("layer 2: {why}");
        }
        update(&publish, |api| api.key = key);
    }
}

/// The Secret's `secretkey`, trimmed as a `secret_file` is.
fn key_of(secret: &Secret, namespace: &str) -> Result<Vec<u8>, String> {
    let name = format!("{namespace}/{SECRET_NAME}");
    let data = secret.data.as_ref().and_then(|data| data.get(SECRET_KEY));
    let Some(bytes) = data else {
        return Err(format!("the Secret {name} has no {SECRET_KEY}"));
    };
    let key = bytes.0.trim_ascii();
    if key.len() < MIN_KEY {
        return Err(format!(
            "the Secret {name}'s {SECRET_KEY} is {} bytes; use at least {MIN_KEY} random ones (`openssl rand -base64 128`, as MetalLB's docs)",
            key.len()
        ));
    }
    Ok(key.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeAddress, NodeStatus};
    use k8s_openapi::ByteString;

    #[test]
    fn a_nodes_internal_addresses_and_the_secrets_key() {
        let node = Node {
            metadata: kube::api::ObjectMeta { name: Some("wk1".into()), ..Default::default() },
            status: Some(NodeStatus {
                addresses: Some(vec![
                    NodeAddress { type_: "Hostname".into(), address: "wk1".into() },
                    NodeAddress { type_: "InternalIP".into(), address: "10.0.0.11".into() },
                    NodeAddress { type_: "ExternalIP".into(), address: "198.51.100.1".into() },
                    NodeAddress { type_: "InternalIP".into(), address: "fd00::11".into() },
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let (name, addresses) = addresses(&node).unwrap();
        assert_eq!(name, "wk1");
        assert_eq!(
            addresses,
            ["10.0.0.11".parse::<IpAddr>().unwrap(), "fd00::11".parse().unwrap()]
        );

        let secret = |value: &str| Secret {
            data: Some([(SECRET_KEY.to_string(), ByteString(value.as_bytes().to_vec()))].into()),
            ..Default::default()
        };
        assert_eq!(
            key_of(&secret("a long enough shared key\n"), "metallb-system").unwrap(),
            b"a long enough shared key"
        );
        let short = key_of(&secret("short"), "metallb-system").unwrap_err();
        assert!(short.contains("metallb-system/memberlist's secretkey is 5 bytes"), "{short}");
        let none = key_of(&Secret::default(), "metallb-system").unwrap_err();
        assert!(none.contains("has no secretkey"), "{none}");
    }
}

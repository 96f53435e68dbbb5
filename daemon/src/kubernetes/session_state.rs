//! frr-k8s's `BGPSessionState` (frrk8s.metallb.io/v1beta1), one per session of this node in
//! `[kubernetes] namespace`, with upstream's labels (`frrk8s.metallb.io/node`, `.../peer`,
//! `.../vrf`) and status (`node`, `peer`, `vrf`, `bgpStatus`, `bfdStatus`), so
//! `kubectl get bgpsessionstates` and tools written for frr-k8s read uplink's sessions. Written
//! by server-side apply when a session's state changes; the objects of sessions that are gone
//! (also those a previous run left) are deleted. Names are `<node>-<vrf>-<peer>` rather than
//! upstream's generated ones, so a write needs no lookup.

use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::Client;
use serde_json::json;
use std::collections::BTreeMap;

use super::health::Health;
use super::sessions::{SessionReport, SessionReports};
use super::status::FIELD_MANAGER;
use super::write_outcomes::WriteOutcomes;

const NODE_LABEL: &str = "frrk8s.metallb.io/node";
const PEER_LABEL: &str = "frrk8s.metallb.io/peer";
const VRF_LABEL: &str = "frrk8s.metallb.io/vrf";
const API_VERSION: &str = "frrk8s.metallb.io/v1beta1";

pub(super) fn spawn(
    client: Client,
    namespace: &str,
    node: &str,
    mut reports: SessionReports,
    health: Health,
) {
    let gvk = GroupVersionKind::gvk("frrk8s.metallb.io", "v1beta1", "BGPSessionState");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "bgpsessionstates");
    let api: Api<DynamicObject> = Api::namespaced_with(client, namespace, &resource);
    let node = node.to_string();
    tokio::spawn(async move {
        let mut outcomes = WriteOutcomes::new(
            "BGPSessionState",
            "deploy/kubernetes/crds/frr-k8s.yaml",
            |h| &mut h.session_writes,
            health,
        );
        // What the API holds of this node's sessions, as last written or listed.
        let mut written: Option<BTreeMap<String, Option<SessionReport>>> = None;
        loop {
            let wanted: BTreeMap<String, SessionReport> = reports
                .borrow_and_update()
                .iter()
                .map(|report| (object_name(&node, report), report.clone()))
                .collect();
            match sync(&api, &node, &wanted, &mut written).await {
                Ok(writes) => outcomes.succeeded(writes),
                Err(e) => {
                    let retry = outcomes.failed(&e, written.is_some());
                    if retry.relearn {
                        written = None;
                    }
                    tokio::select! {
                        changed = reports.changed() => if changed.is_err() { return },
                        () = tokio::time::sleep(retry.wait) => {}
                    }
                    continue;
                }
            }
            if reports.changed().await.is_err() {
                return;
            }
        }
    });
}

/// Brings the API's objects of this node to `wanted`; how many it wrote.
async fn sync(
    api: &Api<DynamicObject>,
    node: &str,
    wanted: &BTreeMap<String, SessionReport>,
    written: &mut Option<BTreeMap<String, Option<SessionReport>>>,
) -> Result<u64, kube::Error> {
    let mut writes = 0;
    if written.is_none() {
        // The first time: what a previous run left is listed, so what is gone gets deleted.
        let listed = api
            .list_metadata(&ListParams::default().labels(&format!("{NODE_LABEL}={node}")))
            .await?;
        let names = listed.items.into_iter().filter_map(|o| o.metadata.name);
        *written = Some(names.map(|name| (name, None)).collect());
    }
    let Some(held) = written.as_mut() else { return Ok(writes) };
    for (name, report) in wanted {
        match held.get(name) {
            Some(Some(current)) if current == report => continue,
            Some(_) => {}
            None => {
                let object = json!({
                    "apiVersion": API_VERSION,
                    "kind": "BGPSessionState",
                    "metadata": {
                        "name": name,
                        "labels": {
                            NODE_LABEL: node,
                            PEER_LABEL: peer_label(report),
                            VRF_LABEL: report.vrf,
                        },
                    },
                    "spec": {},
                });
                api.patch(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&object))
                    .await?;
            }
        }
        let status = json!({
            "apiVersion": API_VERSION,
            "kind": "BGPSessionState",
            "status": {
                "node": node,
                "peer": peer_label(report),
                "vrf": report.vrf,
                "bgpStatus": report.bgp,
                "bfdStatus": report.bfd,
            },
        });
        api.patch_status(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&status))
            .await?;
        held.insert(name.clone(), Some(report.clone()));
        writes += 1;
    }
    let gone: Vec<String> =
        held.keys().filter(|name| !wanted.contains_key(*name)).cloned().collect();
    for name in gone {
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(e) => return Err(e),
        }
        held.remove(&name);
    }
    Ok(writes)
}

/// frr-k8s's peer label: an IPv4 address as it is, an IPv6 one expanded with `-` for `:`
/// (a label value cannot hold `:`).
fn peer_label(report: &SessionReport) -> String {
    match report.peer {
        std::net::IpAddr::V4(v4) => v4.to_string(),
        std::net::IpAddr::V6(v6) => {
            let groups: Vec<String> = v6.segments().iter().map(|g| format!("{g:04x}")).collect();
            groups.join("-")
        }
    }
}

/// `<node>-<vrf>-<peer>`, a DNS subdomain as object names must be.
fn object_name(node: &str, report: &SessionReport) -> String {
    let vrf = if report.vrf.is_empty() { "default" } else { report.vrf.as_str() };
    format!("{node}-{vrf}-{}", peer_label(report)).to_lowercase().replace('_', "-")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(vrf: &str, peer: &str) -> SessionReport {
        SessionReport {
            vrf: vrf.into(),
            peer: peer.parse().unwrap(),
            bgp: "Established".into(),
            bfd: "N/A".into(),
        }
    }

    #[test]
    fn names_and_labels_follow_frr_k8s() {
        assert_eq!(object_name("wk1", &report("", "10.99.1.1")), "wk1-default-10.99.1.1");
        assert_eq!(object_name("wk1", &report("CUDN_3", "10.0.0.1")), "wk1-cudn-3-10.0.0.1");
        assert_eq!(peer_label(&report("", "fd00::1")), "fd00-0000-0000-0000-0000-0000-0000-0001");
    }
}

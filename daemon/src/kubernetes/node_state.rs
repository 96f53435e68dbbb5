//! frr-k8s's `FRRNodeState` (frrk8s.metallb.io/v1beta1, cluster-scoped, named after the node):
//! `status.runningConfig` (uplink's running config, as `uplink show running-config --json`
//! has it, passwords redacted), `lastConversionResult` (`success`, or the objects the config
//! refused and why) and `lastReloadResult` (`success`, or why the last reload was rejected), so
//! `kubectl get frrnodestate wk1 -o yaml` answers what it answers with frr-k8s. Looked at every
//! 5 s and written (server-side apply) when it changed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};
use tokio::sync::watch as channel;
use tracing::{info, warn};

use super::health::{self, Health};
use super::status::FIELD_MANAGER;
use crate::config::Config;
use crate::logthrottle::{held_back_note, LogThrottle, LOG_PERIOD};

const PERIOD: Duration = Duration::from_secs(5);

pub(super) fn spawn(
    client: Client,
    node: &str,
    running: channel::Receiver<Arc<Config>>,
    health: Health,
) {
    let gvk = GroupVersionKind::gvk("frrk8s.metallb.io", "v1beta1", "FRRNodeState");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "frrnodestates");
    let api: Api<DynamicObject> = Api::all_with(client, &resource);
    let node = node.to_string();
    tokio::spawn(async move {
        let mut failures = LogThrottle::new(LOG_PERIOD);
        let mut written: Option<Value> = None;
        let mut created = false;
        let mut tick = tokio::time::interval(PERIOD);
        loop {
            tick.tick().await;
            let status = status_of(&running.borrow().clone(), &health::read(&health));
            if written.as_ref() == Some(&status) {
                continue;
            }
            match write(&api, &node, &status, &mut created).await {
                Ok(()) => written = Some(status),
                Err(kube::Error::Api(e)) if e.code == 404 => {
                    info!("FRRNodeState is not served (install deploy/kubernetes/crds/frr-k8s.yaml): the node state is not written");
                    return;
                }
                Err(e) => {
                    if let Some(held_back) = failures.event(Instant::now()) {
                        warn!("cannot write FRRNodeState {node}: {e}{}", held_back_note(held_back));
                    }
                }
            }
        }
    });
}

fn status_of(config: &Config, record: &health::SourceHealth) -> Value {
    let running = serde_json::to_string_pretty(config).unwrap_or_default();
    let conversion = if record.refused.is_empty() {
        "success".to_string()
    } else {
        let refused: Vec<String> = record
            .refused
            .iter()
            .map(|r| format!("{} {}: {}", r.object, r.field, r.message))
            .collect();
        format!("refused, left out: {}", refused.join("; "))
    };
    json!({
        "runningConfig": running,
        "lastConversionResult": conversion,
        "lastReloadResult": record.last_reload.clone().unwrap_or_else(|| "success".into()),
    })
}

async fn write(
    api: &Api<DynamicObject>,
    node: &str,
    status: &Value,
    created: &mut bool,
) -> Result<(), kube::Error> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let typed = |extra: (&str, Value)| {
        let mut object = json!({
            "apiVersion": "frrk8s.metallb.io/v1beta1",
            "kind": "FRRNodeState",
            "metadata": { "name": node },
        });
        if let Some(map) = object.as_object_mut() {
            map.insert(extra.0.to_string(), extra.1);
        }
        object
    };
    if !*created {
        api.patch(node, &params, &Patch::Apply(&typed(("spec", json!({}))))).await?;
        *created = true;
    }
    api.patch_status(node, &params, &Patch::Apply(&typed(("status", status.clone())))).await?;
    Ok(())
}

//! frr-k8s's `FRRNodeState` (frrk8s.metallb.io/v1beta1, cluster-scoped, named after the node):
//! `status.runningConfig` (uplink's running config, as `uplink show running-config --json`
//! has it, passwords redacted), `lastConversionResult` (`success`, or the objects the config
//! refused and why) and `lastReloadResult` (`success`, or why the last reload was rejected), so
//! `kubectl get frrnodestate wk1 -o yaml` answers what it answers with frr-k8s. Written
//! (server-side apply) when it changed and has been quiet for a second, or 30 s after a change
//! while the config keeps changing: at a cluster's size the running config is a megabyte to
//! encode here and to apply in the API server, and encoding it beside a reload (every
//! Kubernetes event is one) delayed the reload.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};
use tokio::sync::watch as channel;

use super::health::{self, Health};
use super::status::FIELD_MANAGER;
use super::write_outcomes::WriteOutcomes;
use crate::config::Config;

/// How often the running config and the results are looked at: a change seen at two looks in
/// a row has been quiet this long.
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// While they keep changing (a rollout), the state is written this long after the first change
/// not yet written.
const WRITE_WITHIN: Duration = Duration::from_secs(30);

/// What a state is made from: the running config (the same Arc while no reload applied) and
/// the results.
type Inputs = (Arc<Config>, Results);

/// Inputs as remembered: the config by identity. A weak reference keeps its address from being
/// reused, not the config: two configs kept through a rollout's 30 s were an old copy of every
/// Service (a heap profile at 10,000 Services).
type Remembered = (Weak<Config>, Results);

fn remember(inputs: &Inputs) -> Remembered {
    (Arc::downgrade(&inputs.0), inputs.1.clone())
}

fn same(a: &Remembered, b: &Inputs) -> bool {
    std::ptr::eq(a.0.as_ptr(), Arc::as_ptr(&b.0)) && a.1 == b.1
}

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
        let mut outcomes = WriteOutcomes::new(
            "FRRNodeState",
            "deploy/kubernetes/crds/frr-k8s.yaml",
            |h| &mut h.node_state_writes,
            health.clone(),
        );
        let mut written: Option<Remembered> = None;
        // The inputs at the last look, and since when a change is not written.
        let mut looked: Option<Remembered> = None;
        let mut unwritten_since: Option<Instant> = None;
        // Whether this run has made the object (or found it made).
        let mut created = false;
        let mut tick = tokio::time::interval(LOOK_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let now: Inputs = (running.borrow().clone(), Results::of(&health::read(&health)));
            if written.as_ref().is_some_and(|w| same(w, &now)) {
                unwritten_since = None;
                looked = Some(remember(&now));
                continue;
            }
            let since = *unwritten_since.get_or_insert_with(Instant::now);
            let quiet = looked.as_ref().is_some_and(|l| same(l, &now));
            looked = Some(remember(&now));
            if !quiet && since.elapsed() < WRITE_WITHIN {
                continue;
            }
            // Encoding a config of thousands of Services is blocking work: off the runtime's
            // workers, which run the reloads.
            let remembered = remember(&now);
            let (config, results) = now;
            let Ok(status) =
                tokio::task::spawn_blocking(move || status_of(&config, &results)).await
            else {
                continue;
            };
            match write(&api, &node, &status, &mut created).await {
                Ok(()) => {
                    outcomes.succeeded(1);
                    written = Some(remembered);
                    unwritten_since = None;
                }
                Err(e) => {
                    let retry = outcomes.failed(&e, created);
                    if retry.relearn {
                        created = false;
                    }
                    tokio::time::sleep(retry.wait).await;
                }
            }
        }
    });
}

/// The most `runningConfig` holds. etcd refuses a request over 1.5 MiB (its default
/// `--max-request-bytes`), and the apiserver an object over that: a config that large (a few
/// thousand Services with their endpoints) keeps its Services out, counted.
const RUNNING_CONFIG_MAX: usize = 1 << 20;

/// `lastConversionResult` and `lastReloadResult`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Results {
    conversion: String,
    reload: String,
}

impl Results {
    fn of(record: &health::SourceHealth) -> Results {
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
        let reload = record.last_reload.clone().unwrap_or_else(|| "success".into());
        Results { conversion, reload }
    }
}

fn status_of(config: &Config, results: &Results) -> Value {
    json!({
        "runningConfig": running_config(config),
        "lastConversionResult": results.conversion,
        "lastReloadResult": results.reload,
    })
}

/// The running config as `uplink show running-config --json` has it, or, past
/// [`RUNNING_CONFIG_MAX`], without its Services (their count in their place). Written as
/// text straight from the config: a JSON value of thousands of Services first was ten times
/// the text (15 MB at 5,000 Services, a peak the allocator then keeps).
fn running_config(config: &Config) -> String {
    let full = serde_json::to_string_pretty(config).unwrap_or_default();
    if full.len() <= RUNNING_CONFIG_MAX {
        return full;
    }
    drop(full);
    let mut without = config.clone();
    let mut announce = without.announce.as_ref().clone();
    announce.services = Vec::new();
    without.announce = Arc::new(announce);
    let mut value = serde_json::to_value(&without).unwrap_or_default();
    if let Some(services) = value.pointer_mut("/announce/services") {
        let count = config.announce.services.len();
        *services = json!(format!(
            "{count} services, left out: more than an object holds; `uplink show running-config` on the node has them"
        ));
    }
    serde_json::to_string_pretty(&value).unwrap_or_default()
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn config_with_services(count: usize) -> Config {
        let mut toml = String::from(
            "[node]\nname = \"wk1\"\n\n[[pools]]\nname = \"vips\"\naddresses = [\"10.200.0.0/16\"]\n",
        );
        for i in 0..count {
            toml.push_str(&format!("\n[[services]]\nname = \"web{i}\"\nnamespace = \"shop\"\n"));
        }
        crate::config::load_sources(&[(PathBuf::from("uplink.toml"), toml)])
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// A config small enough is written whole; past what etcd takes, its Services are left
    /// out and counted, and the rest stays.
    #[test]
    fn the_running_config_fits_in_an_object() {
        let small = running_config(&config_with_services(3));
        assert!(small.contains("\"web2\""), "{small}");
        let config = config_with_services(12_000);
        let full = serde_json::to_string_pretty(&config).unwrap_or_default();
        assert!(full.len() > RUNNING_CONFIG_MAX, "the test needs a config over the limit");
        let written = running_config(&config);
        assert!(written.len() <= RUNNING_CONFIG_MAX, "{} bytes", written.len());
        assert!(written.contains("12000 services, left out"), "{written}");
        assert!(written.contains("\"vips\""), "the pools stay: {written}");
    }

    /// The inputs remembered tell the same config from another without keeping it: once the
    /// running config moves on, the old one is freed.
    #[test]
    fn remembered_inputs_keep_no_config() {
        let results = Results { conversion: "success".into(), reload: "success".into() };
        let first: Inputs = (Arc::new(config_with_services(2)), results.clone());
        let remembered = remember(&first);
        assert!(same(&remembered, &first));
        assert_eq!(Arc::strong_count(&first.0), 1, "remembering holds the config");
        let other: Inputs = (Arc::new(config_with_services(2)), results);
        assert!(!same(&remembered, &other), "an equal config is another config");
        drop(first);
        assert!(remembered.0.upgrade().is_none(), "the old config is freed");
        assert!(!same(&remembered, &other));
    }
}

//! `show bfd peers`: every BFD session of the selected instances, in the keys of FRR's
//! `show bfd peers json`.

use super::protocol::VrfSelector;
use crate::bfd::packet::State;
use crate::bfd::runtime::{Hop, PeerView};
use crate::bgp::instance::Instance;
use crate::config::vrf_display_name;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// FRR's `show bfd peers json` (plus its `counters` keys): a list with one object per peer.
pub async fn peers(instances: &[Arc<Instance>], selector: &VrfSelector) -> Result<Value, String> {
    let mut out = Vec::new();
    for instance in instances.iter().filter(|i| selector.matches(&i.vrf)) {
        let Some(bfd) = instance.bfd() else { continue };
        out.extend(bfd.peers().await?.iter().map(bfd_peer_json));
    }
    Ok(Value::Array(out))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn bfd_peer_json(p: &PeerView) -> Value {
    let multihop = p.spec.hop == Hop::Multi;
    let mut v = json!({
        "multihop": multihop,
        "peer": p.spec.peer.to_string(),
        "vrf": vrf_display_name(&p.vrf),
        "id": p.local_discriminator,
        "remote-id": p.remote_discriminator,
        "passive-mode": p.spec.config.passive,
        "status": p.state.frr_name(),
        "diagnostic": p.local_diagnostic.frr_name(),
        "remote-diagnostic": p.remote_diagnostic.frr_name(),
        "receive-interval": millis(p.spec.config.required_min_rx),
        "transmit-interval": millis(p.spec.config.desired_min_tx),
        "echo-receive-interval": 0,
        "echo-transmit-interval": 0,
        "detect-multiplier": p.spec.config.detect_mult,
        "remote-receive-interval": millis(p.remote_required_min_rx),
        "remote-transmit-interval": millis(p.remote_desired_min_tx),
        "remote-echo-receive-interval": 0,
        "remote-detect-multiplier": p.remote_detect_mult,
        "control-packet-input": p.counters.control_input,
        "control-packet-output": p.counters.control_output,
        "session-up": p.counters.session_up,
        "session-down": p.counters.session_down,
        "control-packet-discarded": p.counters.control_discarded,
        "profile": p.spec.profile,
        // FRR's bfdd has no authentication, so no key of its to reuse; the value is the
        // config's type name.
        "authentication-type": p.spec.auth.as_ref().map_or("none", |a| a.auth_type.name()),
    });
    let Some(map) = v.as_object_mut() else { return v };
    if let Some(auth) = &p.spec.auth {
        map.insert("authentication-key-id".into(), json!(auth.key_id));
    }
    if let Some(local) = p.local_address {
        map.insert("local".into(), json!(local.to_string()));
    }
    if multihop {
        map.insert("minimum-ttl".into(), json!(p.spec.minimum_ttl));
    }
    // FRR shows `uptime` while Up and `downtime` otherwise, in seconds.
    let key = if p.state == State::Up { "uptime" } else { "downtime" };
    map.insert(key.into(), json!(p.since_change.as_secs()));
    if let Some(tx) = p.transmit_interval {
        map.insert("negotiated-transmit-interval".into(), json!(millis(tx)));
    }
    if let Some(detect) = p.detection_time {
        map.insert("detection-time".into(), json!(millis(detect)));
    }
    v
}

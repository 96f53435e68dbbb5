//! Running probes: each attempt looks at the node as it is now (the default gateway is looked
//! up again, as kubernetes-nmstate does), and a probe is retried every `interval` until it
//! passes or its time is up.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::config::network::ProbeSettings;

use super::backend::Backend;
use super::dns;
use super::ping;
use super::probe::Probe;
use super::state::{connected_interface, default_gateway, name_servers};

/// One attempt.
pub async fn attempt(
    probe: &Probe,
    backend: &Backend,
    settings: &ProbeSettings,
    sequence: u16,
) -> Result<(), String> {
    let wait = settings.interval.max(Duration::from_millis(200));
    match probe {
        Probe::DefaultGateway(family) => {
            let current = backend.current().await?;
            let Some(gateway) = default_gateway(&current.json, *family) else {
                return Err("no default route in the main table".into());
            };
            let device = gateway.interface.clone();
            let address = gateway.address;
            blocking(move || ping::echo(address, Some(&device), None, sequence, wait))
                .await
                .map_err(|e| format!("gateway {address} via {}: {e}", gateway.interface))
        }
        Probe::Dns => {
            let current = backend.current().await?;
            let servers = name_servers(&current.json);
            if servers.is_empty() {
                return Err("no name servers configured".into());
            }
            let mut errors = Vec::new();
            for server in servers {
                let name = settings.dns_name.clone();
                match blocking(move || dns::resolve(server, &name, wait)).await {
                    Ok(()) => return Ok(()),
                    Err(e) => errors.push(e),
                }
            }
            Err(format!("{} does not resolve: {}", settings.dns_name, errors.join("; ")))
        }
        Probe::BgpNeighbor { vrf, address, source, single_hop, link_before } => {
            let device = if !vrf.is_empty() {
                Some(vrf.clone())
            } else if *single_hop {
                // The link as it is now; the one from before the change if the change left
                // none (an unbound echo could come back through the other ToR); none at all
                // (an iBGP peer's loopback): the routing table.
                let current = backend.current().await?;
                connected_interface(&current.json, *address).or_else(|| link_before.clone())
            } else {
                None
            };
            let (address, source): (IpAddr, Option<IpAddr>) = (*address, *source);
            let via = device.clone().unwrap_or_default();
            blocking(move || ping::echo(address, device.as_deref(), source, sequence, wait))
                .await
                .map_err(|e| if via.is_empty() { e } else { format!("{e} (via {via})") })
        }
    }
}

/// Retries `probe` until it passes or `timeout` is over; the error is the last attempt's.
pub async fn run(
    probe: &Probe,
    backend: &Backend,
    settings: &ProbeSettings,
    timeout: Duration,
) -> Result<(), String> {
    let start = Instant::now();
    let mut sequence: u16 = 1;
    loop {
        let attempt_start = Instant::now();
        let error = match attempt(probe, backend, settings, sequence).await {
            Ok(()) => return Ok(()),
            Err(error) => error,
        };
        if start.elapsed() + settings.interval > timeout {
            return Err(format!("{error} (for {}s)", start.elapsed().as_secs()));
        }
        sequence = sequence.wrapping_add(1);
        tokio::time::sleep(settings.interval.saturating_sub(attempt_start.elapsed())).await;
    }
}

async fn blocking(f: impl FnOnce() -> Result<(), String> + Send + 'static) -> Result<(), String> {
    tokio::task::spawn_blocking(f).await.map_err(|e| format!("probe thread: {e}"))?
}

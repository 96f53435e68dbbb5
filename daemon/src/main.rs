//! The `uplink` command: `run` starts the daemon; the other subcommands talk to it over the
//! control socket or work on config files.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use uplink::control::protocol::{FamilyArg, Request, VrfSelector};
use uplink::control::{client, render, DEFAULT_SOCKET};

const DEFAULT_CONFIG: &str = "/etc/uplink/uplink.toml";

#[derive(Parser)]
#[command(name = "uplink", version, about = "Connects a bare-metal node to its data-centre fabric")]
struct Cli {
    /// Control socket of the daemon.
    #[arg(long, global = true, default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the daemon (the config is the main file plus conf.d/*.toml next to it).
    Run {
        #[arg(long, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
    },
    /// Validate the config without running; exit 1 with every error found.
    Check {
        #[arg(long, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
    },
    /// Show the daemon's state.
    Show {
        #[command(subcommand)]
        what: Show,
    },
    /// Withdraw this node's service addresses (LoadBalancer VIPs) from every peer before
    /// maintenance; sessions and pod networks stay. Survives a daemon restart, not a reboot.
    Drain,
    /// Announce the service addresses again after `drain`.
    Undrain,
    /// Apply now, without the daemon.
    Apply {
        #[command(subcommand)]
        what: Apply,
    },
}

#[derive(Subcommand)]
enum Apply {
    /// The network policies selecting this node, with probes and rollback (what the daemon
    /// does at start and on reload); exit 1 unless every policy ends Available.
    Network {
        #[arg(long, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
        /// Re-run policies that failed even though they did not change.
        #[arg(long)]
        retry: bool,
    },
}

#[derive(Subcommand)]
enum ShowNetwork {
    /// The policies selecting this node.
    Policies,
    /// What happened to each policy on this node (kept under the state directory).
    Enactments,
    /// nmstate's current view of the node (like NodeNetworkState).
    State,
}

#[derive(Subcommand)]
enum Show {
    /// BGP state.
    Bgp {
        #[command(subcommand)]
        what: ShowBgp,
    },
    /// BFD state.
    Bfd {
        #[command(subcommand)]
        what: ShowBfd,
    },
    /// Every prefix this node could originate: announced to which peers, or why not.
    Announcements {
        #[command(flatten)]
        common: Common,
    },
    /// The merged, effective config after all fragments and manifests, with source files.
    RunningConfig {
        /// Print JSON instead of YAML-like text.
        #[arg(long)]
        json: bool,
    },
    /// The routes uplink installs in the kernel: next hops, nexthop group, state.
    Fib {
        #[command(flatten)]
        common: Common,
    },
    /// The node's own network: policies, enactments, or nmstate's state (read from the
    /// config, the state directory and nmstate; no daemon needed).
    Network {
        #[command(subcommand)]
        what: Option<ShowNetwork>,
        #[arg(long, global = true, default_value = DEFAULT_CONFIG)]
        config: PathBuf,
        /// Print JSON instead of text.
        #[arg(long, global = true)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum ShowBfd {
    /// BFD sessions, like `show bfd peers` (every VRF unless --vrf).
    Peers {
        #[command(flatten)]
        common: Common,
    },
}

#[derive(Args)]
struct Common {
    /// VRF name, `default`, or `all`.
    #[arg(long)]
    vrf: Option<String>,
    /// Print JSON (FRR's key names) instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum ShowBgp {
    /// Sessions and prefix counts, like `show bgp summary`.
    Summary {
        #[command(flatten)]
        common: Common,
    },
    /// Session details, like `show bgp neighbors [ADDR]`.
    Neighbors {
        address: Option<String>,
        #[command(flatten)]
        common: Common,
    },
    /// The BGP table, like `show bgp [ipv4|ipv6] unicast [PREFIX]`.
    Routes {
        #[arg(long, value_enum)]
        family: Option<Family>,
        prefix: Option<String>,
        #[command(flatten)]
        common: Common,
    },
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum Family {
    Ipv4,
    Ipv6,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Run { config } => {
            uplink::ops::logging::init();
            match uplink::daemon::run(&config, &cli.socket) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("uplink: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Check { config } => match uplink::config::load(&config) {
            Ok(model) => {
                let neighbors: usize = model.bgp.routers.iter().map(|r| r.neighbors.len()).sum();
                println!(
                    "{}: OK ({} file(s), {} router(s), {neighbors} neighbor(s))",
                    config.display(),
                    model.files.len(),
                    model.bgp.routers.len()
                );
                // Allocation is a pure function of the config: say which services share a home
                // slot, since adding or removing one of them moves the other.
                let allocation =
                    uplink::announce::allocate(&model.announce.pools, &model.announce.services);
                for c in &allocation.collisions {
                    println!(
                        "note: service {} hashes to {} in pool {}, held by {}; it got {} instead",
                        c.service, c.home, c.pool, c.holder, c.got
                    );
                }
                for (service, result) in &allocation.services {
                    if let Err(e) = result {
                        println!("warning: service {service} gets no address: {e}");
                    }
                }
                print!("{}", uplink::control::network::check_report(&model));
                ExitCode::SUCCESS
            }
            Err(errors) => {
                eprintln!("{errors}");
                ExitCode::FAILURE
            }
        },
        Command::Show { what: Show::Network { what, config, json } } => {
            show_network(what, &config, json)
        }
        Command::Apply { what: Apply::Network { config, retry } } => {
            uplink::ops::logging::init();
            let model = match uplink::config::load(&config) {
                Ok(model) => model,
                Err(errors) => {
                    eprintln!("{errors}");
                    return ExitCode::FAILURE;
                }
            };
            match uplink::control::network::apply(&model, retry) {
                Ok((report, ok)) => {
                    print!("{report}");
                    if ok {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    }
                }
                Err(e) => {
                    eprintln!("uplink: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Show { what } => {
            let (request, json) = match what {
                Show::Bfd { what: ShowBfd::Peers { common } } => {
                    // Every VRF unless one is named, like FRR's `show bfd peers`.
                    let vrf = match common.vrf.as_deref() {
                        None => VrfSelector::All,
                        some => VrfSelector::parse(some),
                    };
                    (Request::BfdPeers { vrf }, common.json)
                }
                Show::Announcements { common } => (
                    Request::Announcements { vrf: VrfSelector::parse(common.vrf.as_deref()) },
                    common.json,
                ),
                Show::RunningConfig { json } => (Request::RunningConfig, json),
                Show::Network { .. } => return ExitCode::FAILURE, // handled above
                Show::Fib { common } => {
                    (Request::Fib { vrf: VrfSelector::parse(common.vrf.as_deref()) }, common.json)
                }
                Show::Bgp { what } => match what {
                    ShowBgp::Summary { common } => (
                        Request::BgpSummary { vrf: VrfSelector::parse(common.vrf.as_deref()) },
                        common.json,
                    ),
                    ShowBgp::Neighbors { address, common } => (
                        Request::BgpNeighbors {
                            vrf: VrfSelector::parse(common.vrf.as_deref()),
                            address,
                        },
                        common.json,
                    ),
                    ShowBgp::Routes { family, prefix, common } => (
                        Request::BgpRoutes {
                            vrf: VrfSelector::parse(common.vrf.as_deref()),
                            family: family.map(|f| match f {
                                Family::Ipv4 => FamilyArg::Ipv4,
                                Family::Ipv6 => FamilyArg::Ipv6,
                            }),
                            prefix,
                        },
                        common.json,
                    ),
                },
            };
            show(&cli.socket, &request, json)
        }
        Command::Drain => show(&cli.socket, &Request::Drain { drained: true }, false),
        Command::Undrain => show(&cli.socket, &Request::Drain { drained: false }, false),
    }
}

/// `uplink show network …`: answered from the config, the state directory and nmstate.
fn show_network(what: Option<ShowNetwork>, config: &std::path::Path, json: bool) -> ExitCode {
    use uplink::control::network;
    let model = match uplink::config::load(config) {
        Ok(model) => model,
        Err(errors) => {
            eprintln!("{errors}");
            return ExitCode::FAILURE;
        }
    };
    type Render = fn(&serde_json::Value) -> String;
    let (value, render): (Result<serde_json::Value, String>, Render) = match what
        .unwrap_or(ShowNetwork::Enactments)
    {
        ShowNetwork::Policies => (Ok(network::policies(&model.network)), network::render_policies),
        ShowNetwork::Enactments => {
            (network::enactments(&model.network), network::render_enactments)
        }
        ShowNetwork::State => (network::state(&model.network), network::render_state),
    };
    match value {
        Ok(value) if json => {
            println!("{}", serde_json::to_string_pretty(&value).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Ok(value) => {
            print!("{}", render(&value));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("uplink: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Sends a `show` request and prints the answer as text or JSON.
fn show(socket: &std::path::Path, request: &Request, json: bool) -> ExitCode {
    match client::call(socket, request) {
        Ok(value) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&value).unwrap_or_default());
            } else {
                print!("{}", render::text(request, &value));
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("uplink: {e}");
            ExitCode::FAILURE
        }
    }
}

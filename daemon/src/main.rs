//! The `uplink` command: `run` starts the daemon; the other subcommands talk to it over the
//! control socket or work on config files.
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use uplink::control::protocol::{ClearHow, FamilyArg, Request, VrfSelector};
use uplink::control::{client, render, DEFAULT_SOCKET};

const DEFAULT_CONFIG: &str = "/etc/uplink/uplink.toml";
const DEFAULT_STATE_DIR: &str = "/var/lib/uplink";

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
        /// Where the daemon keeps what must outlive it (the drain record).
        #[arg(long, default_value = DEFAULT_STATE_DIR)]
        state_dir: PathBuf,
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
    /// Move traffic away before maintenance: announce everything this node originates with
    /// GRACEFUL_SHUTDOWN and LOCAL_PREF 0 (RFC 8326), wait `drain_time`, then withdraw the
    /// service addresses (LoadBalancer VIPs). Sessions stay up. Survives a daemon restart, and
    /// a restart of a drained daemon is still graceful (RFC 4724): the peers keep the prefixes
    /// the drain kept.
    Drain {
        /// Return once GRACEFUL_SHUTDOWN is announced, not after the withdrawal.
        #[arg(long)]
        no_wait: bool,
        /// The node is about to shut down or power off (what logind's shutdown does by
        /// itself): not recorded, so the node serves again after its reboot, and the daemon's
        /// stop ends every session with a Cease instead of a graceful restart.
        #[arg(long)]
        shutdown: bool,
    },
    /// Announce everything again after `drain`.
    Undrain,
    /// Wait until every configured session is Established and End-of-RIB went both ways
    /// (exit 1 naming the sessions that are not, after the timeout). For rollouts, and for
    /// units ordered after uplink-wait-ready.service.
    WaitReady {
        /// How long to wait, e.g. "120s" or "5m".
        #[arg(long, default_value = "120s", value_parser = parse_duration_arg)]
        timeout: Duration,
    },
    /// Re-read the config and apply what changed; wait for the result and print it (routers
    /// and neighbors added, removed, reset and why, updated live). Exits non-zero when the
    /// config is rejected, with its errors; nothing changes then.
    Reload {
        /// How long to wait for the daemon's answer (e.g. "90s").
        #[arg(long, default_value = "90s", value_parser = parse_duration_arg)]
        timeout: Duration,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Answer vtysh's `show` commands as FRR 8.4 does, for scripts and tools written for FRR:
    /// `uplink vtysh -c "show bgp vrf all ipv4 unicast summary json"`. Forms: `show [ip] bgp
    /// [vrf NAME|all] [ipv4|ipv6 [unicast]] summary|neighbors [ADDR [advertised-routes|
    /// received-routes]]|[PREFIX]`, `show bfd [vrf NAME] peers [counters]`, `show ip|ipv6
    /// route [vrf NAME|all]`, each with `json` for FRR's JSON.
    Vtysh {
        /// A command as given to `vtysh -c`; repeat to run several in order.
        #[arg(short = 'c', long = "command", required = true)]
        commands: Vec<String>,
    },
    /// Reset BGP sessions or exchange their routes again, like FRR's `clear bgp`.
    Clear {
        #[command(subcommand)]
        what: Clear,
    },
    /// Apply now, without the daemon.
    Apply {
        #[command(subcommand)]
        what: Apply,
    },
}

#[derive(Subcommand)]
enum Clear {
    /// `clear bgp ADDR|* [soft [in|out]]`: without `soft`, end the session with
    /// Cease/Administrative Reset (RFC 4486) and connect again (a session held down by
    /// max-prefix starts again); `soft in` asks the peer to send its routes again
    /// (ROUTE-REFRESH, RFC 2918), `soft out` sends ours again, `soft` both. Exit 1 if a
    /// session could not be cleared.
    Bgp {
        /// A neighbor's address, or `*` for every neighbor of the VRF.
        target: String,
        /// Nothing (hard), `soft`, `soft in` or `soft out`.
        #[arg(num_args = 0..=2)]
        how: Vec<String>,
        #[command(flatten)]
        common: Common,
    },
}

/// `soft [in|out]` as typed after `clear bgp ADDR`.
fn parse_clear_how(words: &[String]) -> Result<ClearHow, String> {
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    match words.as_slice() {
        [] => Ok(ClearHow::Hard),
        ["soft"] => Ok(ClearHow::Soft),
        ["soft", "in"] => Ok(ClearHow::SoftIn),
        ["soft", "out"] => Ok(ClearHow::SoftOut),
        other => Err(format!(
            "`{}`: write nothing (a hard reset), `soft`, `soft in` or `soft out`",
            other.join(" ")
        )),
    }
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
    /// The Kubernetes source: the API server, each kind's watch, the objects refused.
    Kubernetes {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Layer 2 mode: the membership, and who answers ARP/NDP for each address and why.
    L2 {
        /// Print JSON instead of text.
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
        Command::Run { config, state_dir } => {
            uplink::ops::logging::init();
            match uplink::daemon::run(&config, &cli.socket, &state_dir) {
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
                for skipped in &model.skipped {
                    println!("note: {skipped}");
                }
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
                for (service, result) in allocation.results_in_key_order() {
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
                Show::Kubernetes { json } => (Request::Kubernetes, json),
                Show::L2 { json } => (Request::L2, json),
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
        Command::Drain { no_wait, shutdown } => {
            let request = Request::Drain { wait: !no_wait, shutdown };
            // drain_time is at most an hour (config::validate).
            match client::call_waiting(&cli.socket, &request, Duration::from_secs(3700)) {
                Ok(value) => {
                    print!("{}", render::text(&request, &value));
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("uplink: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Undrain => show(&cli.socket, &Request::Undrain, false),
        Command::Vtysh { commands } => vtysh(&cli.socket, &commands),
        Command::WaitReady { timeout } => wait_ready(&cli.socket, timeout),
        Command::Reload { timeout, json } => reload(&cli.socket, timeout, json),
        Command::Clear { what: Clear::Bgp { target, how, common } } => {
            let how = match parse_clear_how(&how) {
                Ok(how) => how,
                Err(e) => {
                    eprintln!("uplink: clear bgp {target} {e}");
                    return ExitCode::FAILURE;
                }
            };
            let address = (target != "*").then_some(target);
            let request =
                Request::ClearBgp { vrf: VrfSelector::parse(common.vrf.as_deref()), address, how };
            clear(&cli.socket, &request, common.json)
        }
    }
}

/// `uplink clear bgp`: prints what each session did; exit 1 if one could not be cleared.
fn clear(socket: &std::path::Path, request: &Request, json: bool) -> ExitCode {
    let value = match client::call(socket, request) {
        Ok(value) => value,
        Err(e) => {
            eprintln!("uplink: {e}");
            return ExitCode::FAILURE;
        }
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&value).unwrap_or_default());
    } else {
        print!("{}", render::text(request, &value));
    }
    let cleared = value.get("clear").and_then(serde_json::Value::as_array);
    let failed = cleared.into_iter().flatten().any(|n| n.get("error").is_some());
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// `uplink reload`: asks the daemon to reload and prints what it did. Exits 1 when the config
/// was rejected (the errors go to stderr) or the daemon did not answer, so `systemctl reload`
/// fails too.
fn reload(socket: &std::path::Path, timeout: Duration, json: bool) -> ExitCode {
    let value = match client::call_waiting(socket, &Request::Reload, timeout) {
        Ok(value) => value,
        Err(e) => {
            eprintln!("uplink: {e}");
            return ExitCode::FAILURE;
        }
    };
    let applied = value.get("applied") == Some(&serde_json::Value::Bool(true));
    let text = if json {
        format!("{}\n", serde_json::to_string_pretty(&value).unwrap_or_default())
    } else {
        render::text(&Request::Reload, &value)
    };
    if applied {
        print!("{text}");
        ExitCode::SUCCESS
    } else {
        if json {
            print!("{text}");
        } else {
            eprint!("{text}");
        }
        ExitCode::FAILURE
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

fn parse_duration_arg(text: &str) -> Result<Duration, String> {
    uplink::config::duration::parse_duration(text).map_err(|e| e.to_string())
}

/// Polls the daemon until every session is ready or `timeout` passes (the daemon may still be
/// starting: an unreachable socket is waited for too).
fn wait_ready(socket: &std::path::Path, timeout: Duration) -> ExitCode {
    let deadline = std::time::Instant::now() + timeout;
    let last = loop {
        let answer = client::call(socket, &Request::Ready);
        if let Ok(value) = &answer {
            if value["ready"] == true {
                print!("{}", render::text(&Request::Ready, value));
                return ExitCode::SUCCESS;
            }
        }
        if std::time::Instant::now() >= deadline {
            break answer;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    match last {
        Ok(value) => eprint!("{}", render::text(&Request::Ready, &value)),
        Err(e) => eprintln!("uplink: {e}"),
    }
    eprintln!("uplink: not ready after {}", uplink::config::duration::format_duration(timeout));
    ExitCode::FAILURE
}

/// `uplink vtysh -c ...`: each command's answer as vtysh prints it; exit 1 at the first
/// command that is not understood or fails, as vtysh does.
fn vtysh(socket: &std::path::Path, commands: &[String]) -> ExitCode {
    use uplink::control::vtysh::{parse, present, View};
    for line in commands {
        let command = match parse(line) {
            Ok(command) => command,
            Err(e) => {
                println!("% {e}");
                return ExitCode::FAILURE;
            }
        };
        let answer = match client::call(socket, &command.request) {
            Ok(answer) => answer,
            Err(e) => {
                println!("% {e}");
                return ExitCode::FAILURE;
            }
        };
        if command.json {
            let value = present(command.view, answer);
            println!("{}", serde_json::to_string_pretty(&value).unwrap_or_default());
        } else {
            // The text renderers read the daemon's shape: one family's summary keeps its key.
            let view = match command.view {
                View::SummaryOf(family) => View::SummaryKeep { family, all_vrfs: false },
                View::BfdCounters => View::Whole,
                other => other,
            };
            print!("{}", render::text(&command.request, &present(view, answer)));
        }
    }
    ExitCode::SUCCESS
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

//! Arbitrary bytes as what a client writes to the control socket: split into request lines as
//! the server reads them (up to a newline, at most `MAX_REQUEST` bytes; a longer line ends the
//! connection), each parsed by `protocol::parse_request` as the server does, and the
//! arguments of a parsed request run through the parsers that answer it (`show bgp neighbors
//! ADDR`, `show bgp routes PREFIX|ADDRESS`).
//!
//! The same bytes, as text, are a command line for `uplink vtysh -c`: read into a request or
//! refused with a message, and an answer of any shape cut to FRR's.
//!
//! Besides "never panics": a parsed request, encoded the way the CLI encodes it, parses back
//! to the same request; a prefix lookup has its host bits cleared; every answer (the request
//! or its error) encodes as one JSON line.

#![no_main]

use libfuzzer_sys::fuzz_target;
use uplink::bgp::view::Lookup;
use uplink::control::bgp::{parse_lookup, parse_neighbor_address};
use uplink::control::protocol::{parse_request, Request, Response, VrfSelector};
use uplink::control::server::MAX_REQUEST;

fuzz_target!(|data: &[u8]| {
    let cap = usize::try_from(MAX_REQUEST).unwrap_or(usize::MAX);
    let mut rest = data;
    while !rest.is_empty() {
        let end = rest.iter().position(|&b| b == b'\n').map_or(rest.len(), |i| i + 1);
        let (line, next) = rest.split_at(end);
        rest = next;
        if line.len() > cap {
            return; // Refused, and the connection is closed.
        }
        if let Ok(command) = uplink::control::vtysh::parse(&String::from_utf8_lossy(line)) {
            check(&command.request);
            let answer = serde_json::json!({ "ipv4Unicast": {}, "red": { "10.0.0.0/8": [] } });
            let _ = uplink::control::vtysh::present(command.view, answer);
        }
        let answer = match parse_request(line) {
            Ok(request) => {
                check(&request);
                Response::Ok(serde_json::Value::Null)
            }
            Err(error) => {
                assert!(error.starts_with("bad request: "), "{error}");
                Response::Error(error)
            }
        };
        let text = serde_json::to_string(&answer).expect("an answer must encode");
        assert!(!text.contains('\n'), "an answer is one line");
    }
});

fn check(request: &Request) {
    let mut line = serde_json::to_string(request).expect("a request must encode");
    line.push('\n');
    assert_eq!(parse_request(line.as_bytes()).as_ref(), Ok(request), "{line}");

    let vrf = match request {
        Request::BgpSummary { vrf }
        | Request::BfdPeers { vrf }
        | Request::Announcements { vrf }
        | Request::Fib { vrf } => Some(vrf),
        Request::BgpNeighbors { vrf, address } | Request::ClearBgp { vrf, address, .. } => {
            if let Some(address) = address {
                if let Ok(parsed) = parse_neighbor_address(address) {
                    assert_eq!(parse_neighbor_address(&parsed.to_string()), Ok(parsed));
                }
            }
            Some(vrf)
        }
        Request::BgpNeighborRoutes { vrf, address, .. } => {
            if let Ok(parsed) = parse_neighbor_address(address) {
                assert_eq!(parse_neighbor_address(&parsed.to_string()), Ok(parsed));
            }
            Some(vrf)
        }
        Request::BgpRoutes { vrf, prefix, .. } => {
            if let Some(prefix) = prefix {
                match parse_lookup(prefix) {
                    Ok(Lookup::Prefix(net)) => assert_eq!(net, net.trunc(), "{prefix}"),
                    Ok(Lookup::Address(_)) => {}
                    Err(error) => assert!(error.contains(prefix.as_str())),
                }
            }
            Some(vrf)
        }
        Request::RunningConfig
        | Request::Kubernetes
        | Request::L2
        | Request::Drain { .. }
        | Request::Undrain
        | Request::Ready
        | Request::Reload => None,
    };
    // A named VRF as the CLI would take it from `--vrf NAME`.
    if let Some(VrfSelector::Named(name)) = vrf {
        let selector = VrfSelector::parse(Some(name));
        assert!(selector.matches(name) || name.is_empty() || name == "default" || name == "all");
    }
}

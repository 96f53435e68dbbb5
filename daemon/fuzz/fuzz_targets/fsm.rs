//! The BGP FSM driven by a sequence of events decoded from the bytes, with fake time that only
//! moves forward. A tiny driver model keeps to the driver's side of the contract (fresh
//! connection ids, `TcpConnected` only for an attempt the FSM asked for); everything else —
//! order, timing, the peer's messages — is the fuzzer's choice. Besides "never panics":
//! - `state()` is Established exactly when `established()` names a connection;
//! - every `Established` action is followed by exactly one `Down` with `was_established`
//!   (the RIB withdraws on it), and a batch that ends in `Down` leaves the FSM Idle;
//! - the FSM writes and closes only connections the driver has open, never writes after
//!   closing, and everything it writes is one well-formed BGP message;
//! - no `Connect` while stopped or passive; after a `Tick` no deadline is already due.

#![no_main]

use std::net::Ipv4Addr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use uplink::bgp::fsm::{Action, ConnId, Event, Fsm, FsmConfig, RemoteAsn, SendHoldTime, State};
use uplink::bgp::wire::attributes::Family;
use uplink::bgp::wire::message::{decode_message, frame_len, Message, RouteRefresh};
use uplink::bgp::wire::notification::Notification;
use uplink::bgp::wire::open::{Capability, GracefulRestart, Open, AS_TRANS};

const LOCAL_ASN: u32 = 65001;
const PEER_ASN: u32 = 4_200_000_001;
const LOCAL_ID: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 5);

/// `FSM_TRACE=1 cargo fuzz run ... fsm <input>` prints each event, its actions and the state,
/// to see what a seed or a crash does.
fn tracing() -> bool {
    static TRACE: OnceLock<bool> = OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("FSM_TRACE").is_some())
}

/// Reads the fuzz input one byte at a time; zeros once it runs out.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[usize::from(self.byte()) % from.len()]
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn config(b: &mut Bytes<'_>) -> FsmConfig {
    let flags = b.byte();
    let families = match flags & 3 {
        0 => vec![],
        1 => vec![Family::IPV4_UNICAST],
        2 => vec![Family::IPV6_UNICAST],
        _ => vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST],
    };
    let remote_asn = b.pick(&[
        RemoteAsn::Fixed(PEER_ASN),
        RemoteAsn::Fixed(LOCAL_ASN),
        RemoteAsn::Internal,
        RemoteAsn::External,
    ]);
    let graceful_restart = (flags & 8 != 0).then(|| GracefulRestart {
        restart_state: false,
        notification: true,
        restart_time: 120,
        families: vec![(Family::IPV4_UNICAST, true)],
    });
    FsmConfig {
        local_asn: LOCAL_ASN,
        local_id: LOCAL_ID,
        remote_asn,
        hold_time: Duration::from_secs(b.pick(&[0, 3, 9, 90, 65535])),
        keepalive_time: Duration::from_secs(b.pick(&[0, 1, 30])),
        minimum_hold_time: Duration::from_secs(b.pick(&[0, 3, 10])),
        send_hold_time: b.pick(&[
            SendHoldTime::TwiceHoldTime,
            SendHoldTime::Fixed(Duration::from_secs(1)),
            SendHoldTime::Off,
        ]),
        connect_retry: Duration::from_secs(b.pick(&[1, 5, 120])),
        connect_retry_max: Duration::from_secs(b.pick(&[1, 60, 3600])),
        passive: flags & 4 != 0,
        families,
        graceful_restart,
        jitter_seed: u64::from(b.byte()),
    }
}

/// An OPEN the peer might send: mostly plausible, sometimes wrong in one field.
fn peer_open(b: &mut Bytes<'_>) -> Open {
    let flags = b.byte();
    let asn = b.pick(&[PEER_ASN, LOCAL_ASN, 65002, 0]);
    let mut caps = Vec::new();
    if flags & 1 != 0 {
        caps.push(Capability::MultiProtocol(Family::IPV4_UNICAST));
    }
    if flags & 2 != 0 {
        caps.push(Capability::MultiProtocol(Family::IPV6_UNICAST));
    }
    if flags & 4 != 0 {
        caps.push(Capability::RouteRefresh);
    }
    if flags & 8 != 0 {
        caps.push(Capability::FourOctetAs(asn));
    }
    if flags & 16 != 0 {
        caps.push(Capability::Unknown { code: 1, value: vec![0, 25, 0, 70] });
    }
    let mut open = Open::new(
        asn,
        b.pick(&[0, 1, 2, 3, 9, 90, 65535]),
        b.pick(&[
            LOCAL_ID,
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 9),
            Ipv4Addr::UNSPECIFIED,
        ]),
        caps,
    );
    if flags & 32 != 0 {
        open.my_as = AS_TRANS;
    }
    if flags & 64 != 0 {
        open.version = 3;
    }
    open
}

fn peer_message<'a>(b: &mut Bytes<'_>) -> Message<'a> {
    match b.byte() % 6 {
        0 | 1 => Message::Open(peer_open(b)),
        2 => Message::Keepalive,
        3 => Message::Update(&[0, 0, 0, 0]),
        4 => Message::Notification(Notification::new(b.byte() % 8, b.byte() % 12, Vec::new())),
        _ => Message::RouteRefresh(RouteRefresh { afi: 1, subtype: 0, safi: 1 }),
    }
}

/// What the driver knows: the connections it has open and the outgoing attempts in flight.
#[derive(Default)]
struct Driver {
    next_id: u64,
    open: Vec<ConnId>,
    attempts: Vec<ConnId>,
    /// An `Established` has been reported and no `Down` since.
    up: bool,
}

impl Driver {
    fn fresh(&mut self) -> ConnId {
        self.next_id += 1;
        ConnId(self.next_id)
    }

    /// A connection id for an event about an existing connection; now and then one the
    /// driver already closed (a late event from a socket task is harmless).
    fn existing(&mut self, b: &mut Bytes<'_>) -> Option<ConnId> {
        let choice = usize::from(b.byte());
        if choice == 255 {
            return Some(ConnId(self.next_id.saturating_sub(1)));
        }
        self.open.get(choice % self.open.len().max(1)).copied()
    }
}

fn check_actions(fsm: &Fsm, drv: &mut Driver, actions: &[Action], stopped: bool, passive: bool) {
    let mut closed = Vec::new();
    for action in actions {
        match action {
            Action::Connect => {
                assert!(!stopped, "Connect while stopped");
                assert!(!passive, "Connect from a passive FSM");
                let id = drv.fresh();
                drv.attempts.push(id);
            }
            Action::Send(id, bytes) => {
                assert!(drv.open.contains(id), "Send on {id:?}, not an open connection");
                assert!(!closed.contains(id), "Send on {id:?} after Close");
                assert_eq!(frame_len(bytes), Ok(Some(bytes.len())), "FSM wrote a bad frame");
                assert!(decode_message(bytes).is_ok(), "FSM wrote an undecodable message");
            }
            Action::Close(id) => {
                assert!(drv.open.contains(id), "Close of {id:?}, not an open connection");
                assert!(!closed.contains(id), "second Close of {id:?}");
                closed.push(*id);
            }
            Action::Established(id, _) => {
                assert!(!drv.up, "Established twice without Down");
                assert!(drv.open.contains(id) && !closed.contains(id));
                drv.up = true;
            }
            Action::Down { reason } => {
                assert_eq!(reason.was_established, drv.up, "Down: {reason}");
                drv.up = false;
            }
        }
    }
    drv.open.retain(|id| !closed.contains(id));

    let established = fsm.established();
    assert_eq!(fsm.state() == State::Established, established.is_some());
    assert_eq!(fsm.state() == State::Established, drv.up);
    if let Some((id, _)) = established {
        assert!(drv.open.contains(&id));
    }
    if matches!(actions.last(), Some(Action::Down { .. })) {
        assert_eq!(fsm.state(), State::Idle);
    }
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes(data);
    let cfg = config(&mut b);
    if cfg.validate().is_err() {
        return;
    }
    let passive = cfg.passive;
    let mut fsm = Fsm::new(cfg);
    let mut drv = Driver::default();
    let mut now = Instant::now();
    let mut stopped = true;

    for _ in 0..256 {
        if b.is_empty() {
            break;
        }
        let event = match b.byte() % 13 {
            0 => Event::ManualStart,
            1 => Event::ManualStop {
                subcode: b.pick(&[2, 4, 6, 9]),
                reason: "x".repeat(usize::from(b.byte())),
            },
            2 => {
                // Sleep until the next deadline, as the driver does.
                if let Some(deadline) = fsm.next_deadline() {
                    now = now.max(deadline);
                }
                Event::Tick
            }
            3 => {
                now += Duration::from_millis(u64::from(b.byte()) * 250);
                Event::Tick
            }
            4 => {
                if drv.attempts.is_empty() {
                    continue;
                }
                let i = usize::from(b.byte()) % drv.attempts.len();
                let id = drv.attempts.remove(i);
                drv.open.push(id);
                Event::TcpConnected(id)
            }
            5 => {
                if let Some(id) = drv.attempts.pop() {
                    Event::TcpFailed(id)
                } else {
                    let Some(id) = drv.existing(&mut b) else { continue };
                    Event::TcpFailed(id)
                }
            }
            6 => {
                let id = drv.fresh();
                drv.open.push(id);
                Event::TcpAccepted(id)
            }
            7 => {
                let Some(id) = drv.existing(&mut b) else { continue };
                Event::TcpClosed(id)
            }
            8 | 9 => {
                let Some(id) = drv.existing(&mut b) else { continue };
                Event::Received(id, peer_message(&mut b))
            }
            10 => {
                let Some(id) = drv.existing(&mut b) else { continue };
                Event::UpdateSent(id)
            }
            11 => {
                let Some(id) = drv.existing(&mut b) else { continue };
                Event::SendProgress(id)
            }
            _ => {
                let Some(id) = drv.existing(&mut b) else { continue };
                Event::FatalUpdateError(id, Notification::new(3, b.byte() % 12, Vec::new()))
            }
        };
        let is_tick = event == Event::Tick;
        match &event {
            Event::ManualStart => stopped = false,
            Event::ManualStop { .. } => stopped = true,
            _ => {}
        }
        // The driver forgets a connection whose socket failed or closed only after the FSM
        // has seen the event; a Close for it in this batch is still legitimate.
        let gone = match &event {
            Event::TcpFailed(id) | Event::TcpClosed(id) => Some(*id),
            _ => None,
        };
        let trace = tracing().then(|| format!("{event:?}"));
        let actions = fsm.handle(event, now);
        if let Some(event) = trace {
            let kinds: Vec<String> = actions
                .iter()
                .map(|a| match a {
                    Action::Send(id, bytes) => {
                        format!("Send({}, {:?})", id.0, decode_message(bytes))
                    }
                    other => format!("{other:?}"),
                })
                .collect();
            eprintln!("{event}\n  -> {kinds:?}\n  state {:?}", fsm.state());
        }
        check_actions(&fsm, &mut drv, &actions, stopped, passive);
        if let Some(id) = gone {
            drv.open.retain(|&o| o != id);
        }
        if is_tick {
            assert!(
                fsm.next_deadline().is_none_or(|d| d > now),
                "a deadline is still due after Tick"
            );
        }
        now += Duration::from_millis(u64::from(b.byte() % 16) * 100);
    }
});

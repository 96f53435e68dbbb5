//! FSM tests with a fake clock: every `Instant` is `base + offset`.

use std::net::Ipv4Addr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::*;
use crate::bgp::wire::header::MessageType;
use crate::bgp::wire::message::{decode_message, RouteRefresh};
use crate::bgp::wire::open::AS_TRANS;

fn base() -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

fn t(secs: f64) -> Instant {
    base() + Duration::from_secs_f64(secs)
}

const LOCAL_ID: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const PEER_ID: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const C1: ConnId = ConnId(1);
const C2: ConnId = ConnId(2);

fn cfg() -> FsmConfig {
    FsmConfig {
        local_asn: 65001,
        local_id: LOCAL_ID,
        remote_asn: RemoteAsn::Fixed(65002),
        hold_time: Duration::from_secs(90),
        keepalive_time: Duration::from_secs(30),
        minimum_hold_time: Duration::ZERO,
        send_hold_time: SendHoldTime::TwiceHoldTime,
        connect_retry: Duration::from_secs(5),
        connect_retry_max: Duration::from_secs(60),
        passive: false,
        families: vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST],
        graceful_restart: None,
        jitter_seed: 1,
    }
}

fn peer_open(asn: u32, id: Ipv4Addr, hold: u16) -> Open {
    Open::new(
        asn,
        hold,
        id,
        vec![
            Capability::MultiProtocol(Family::IPV4_UNICAST),
            Capability::RouteRefresh,
            Capability::FourOctetAs(asn),
        ],
    )
}

/// The messages sent on `id`, decoded, as (type, notification if any, open if any).
fn sent(actions: &[Action], id: ConnId) -> Vec<(MessageType, Option<Notification>, Option<Open>)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Send(to, bytes) if *to == id => Some(bytes),
            _ => None,
        })
        .map(|bytes| {
            let msg = decode_message(bytes).expect("FSM sent an undecodable message");
            let kind = msg.kind();
            match msg {
                Message::Notification(n) => (kind, Some(n), None),
                Message::Open(o) => (kind, None, Some(o)),
                _ => (kind, None, None),
            }
        })
        .collect()
}

fn sent_kinds(actions: &[Action], id: ConnId) -> Vec<MessageType> {
    sent(actions, id).into_iter().map(|(k, _, _)| k).collect()
}

fn sent_notification(actions: &[Action], id: ConnId) -> Option<Notification> {
    sent(actions, id).into_iter().find_map(|(_, n, _)| n)
}

fn closed(actions: &[Action], id: ConnId) -> bool {
    actions.contains(&Action::Close(id))
}

fn down(actions: &[Action]) -> Option<&DownReason> {
    actions.iter().find_map(|a| match a {
        Action::Down { reason } => Some(reason),
        _ => None,
    })
}

fn established(actions: &[Action]) -> Option<&Negotiated> {
    actions.iter().find_map(|a| match a {
        Action::Established(_, n) => Some(n),
        _ => None,
    })
}

fn open_msg(open: Open) -> Event<'static> {
    Event::Received(C1, Message::Open(open))
}

/// ManualStart, outgoing connection C1, OPEN and KEEPALIVE from the peer at time 0.
fn establish(fsm: &mut Fsm, open: Open) -> Vec<Action> {
    let mut all = fsm.handle(Event::ManualStart, t(0.0));
    all.extend(fsm.handle(Event::TcpConnected(C1), t(0.0)));
    all.extend(fsm.handle(open_msg(open), t(0.0)));
    all.extend(fsm.handle(Event::Received(C1, Message::Keepalive), t(0.0)));
    assert_eq!(fsm.state(), State::Established, "{all:?}");
    all
}

#[test]
fn state_transitions() {
    let mut fsm = Fsm::new(cfg());
    assert_eq!(fsm.state(), State::Idle);
    assert_eq!(fsm.next_deadline(), None);
    // (event, time, expected state, expected Connect action)
    let steps: Vec<(Event<'static>, f64, State, bool)> = vec![
        (Event::ManualStart, 0.0, State::Connect, true),
        (Event::TcpFailed(C1), 1.0, State::Active, false),
        (Event::Tick, 5.0, State::Connect, true),
        (Event::TcpConnected(C2), 6.0, State::OpenSent, false),
        (
            Event::Received(C2, Message::Open(peer_open(65002, PEER_ID, 90))),
            6.5,
            State::OpenConfirm,
            false,
        ),
        (Event::Received(C2, Message::Keepalive), 7.0, State::Established, false),
        (Event::Received(C2, Message::Update(&[0, 0, 0, 0])), 8.0, State::Established, false),
        (Event::TcpClosed(C2), 9.0, State::Idle, false),
        (Event::Tick, 20.0, State::Connect, true),
        (Event::TcpAccepted(ConnId(3)), 21.0, State::OpenSent, false),
        (Event::TcpClosed(ConnId(3)), 22.0, State::Idle, false),
    ];
    for (i, (event, at, state, connect)) in steps.into_iter().enumerate() {
        let actions = fsm.handle(event, t(at));
        assert_eq!(fsm.state(), state, "step {i}: {actions:?}");
        assert_eq!(actions.contains(&Action::Connect), connect, "step {i}: {actions:?}");
    }
}

#[test]
fn connect_sends_open_with_our_capabilities() {
    let mut config = cfg();
    config.local_asn = 4_200_000_001;
    config.graceful_restart = Some(GracefulRestart {
        restart_state: false,
        notification: true,
        restart_time: 120,
        families: vec![(Family::IPV4_UNICAST, false)],
    });
    let mut fsm = Fsm::new(config);
    fsm.handle(Event::ManualStart, t(0.0));
    let actions = fsm.handle(Event::TcpConnected(C1), t(0.0));
    let open = sent(&actions, C1).into_iter().find_map(|(_, _, o)| o).unwrap();
    // RFC 6793 §4.1: AS_TRANS in My AS, the real ASN in the capability.
    assert_eq!(open.my_as, AS_TRANS);
    assert_eq!(open.four_octet_asn(), Some(4_200_000_001));
    assert_eq!(open.hold_time, 90);
    assert_eq!(open.bgp_id, LOCAL_ID);
    assert_eq!(open.families(), [Family::IPV4_UNICAST, Family::IPV6_UNICAST]);
    assert!(open.supports_route_refresh());
    assert_eq!(open.graceful_restart().unwrap().restart_time, 120);
    // OpenSent runs a 4-minute hold timer (RFC 4271 §8.2.2).
    assert_eq!(fsm.next_deadline(), Some(t(240.0)));
}

#[test]
fn established_reports_negotiated_parameters() {
    let mut fsm = Fsm::new(cfg());
    let mut open = peer_open(65002, PEER_ID, 180);
    open.capabilities.push(Capability::MultiProtocol(Family::IPV6_UNICAST));
    let gr = GracefulRestart {
        restart_state: true,
        notification: false,
        restart_time: 90,
        families: vec![(Family::IPV6_UNICAST, true)],
    };
    open.capabilities.push(Capability::GracefulRestart(gr.clone()));
    let received = open.capabilities.clone();
    let actions = establish(&mut fsm, open);
    let n = established(&actions).unwrap();
    assert_eq!(
        *n,
        Negotiated {
            remote_asn: 65002,
            remote_id: PEER_ID,
            hold_time: Duration::from_secs(90),
            keepalive_time: Duration::from_secs(30),
            families: vec![Family::IPV4_UNICAST, Family::IPV6_UNICAST],
            four_octet_as: true,
            route_refresh: true,
            remote_graceful_restart: Some(gr),
            is_ebgp: true,
            capabilities: CapabilityExchange { sent: cfg().open().capabilities, received },
        }
    );
    assert_eq!(fsm.established().map(|(id, _)| id), Some(C1));
    // OPEN accepted: our KEEPALIVE goes out in OpenSent -> OpenConfirm.
    assert_eq!(sent_kinds(&actions, C1), [MessageType::Open, MessageType::Keepalive]);
}

#[test]
fn hold_time_negotiation() {
    // (our hold, our keepalive, peer hold) -> (hold, keepalive)
    let cases = [
        (90, 30, 180, 90, 30),
        (90, 30, 30, 30, 10),
        (9, 3, 90, 9, 3),
        (90, 0, 90, 90, 30),
        (90, 30, 3, 3, 1),
        (90, 30, 10, 10, 3),
        (90, 30, 0, 0, 0),
        (0, 30, 90, 0, 0),
    ];
    for (ours, ka, peer, hold, keepalive) in cases {
        let mut config = cfg();
        config.hold_time = Duration::from_secs(ours);
        config.keepalive_time = Duration::from_secs(ka);
        let mut fsm = Fsm::new(config);
        let actions = establish(&mut fsm, peer_open(65002, PEER_ID, peer));
        let n = established(&actions).unwrap();
        assert_eq!(n.hold_time, Duration::from_secs(hold), "{ours}/{ka} vs {peer}");
        assert_eq!(n.keepalive_time, Duration::from_secs(keepalive), "{ours}/{ka} vs {peer}");
        if hold == 0 {
            // RFC 4271 §4.4: no hold timer and no KEEPALIVEs.
            assert_eq!(fsm.next_deadline(), None);
        }
    }
}

fn expect_open_rejected(config: FsmConfig, open: Open, code: u8, subcode: u8) -> Notification {
    let mut fsm = Fsm::new(config);
    fsm.handle(Event::ManualStart, t(0.0));
    fsm.handle(Event::TcpConnected(C1), t(0.0));
    let actions = fsm.handle(open_msg(open.clone()), t(1.0));
    let n = sent_notification(&actions, C1).unwrap_or_else(|| panic!("{open:?}: {actions:?}"));
    assert_eq!((n.code, n.subcode), (code, subcode), "{open:?}");
    assert!(closed(&actions, C1));
    let reason = down(&actions).unwrap();
    assert_eq!(reason.cause, DownCause::NotificationSent(n.clone()));
    assert!(!reason.was_established);
    assert!(reason.text.starts_with("Notification sent (OPEN Message Error/"), "{}", reason.text);
    assert_eq!(fsm.state(), State::Idle);
    n
}

#[test]
fn open_validation_failures() {
    let mut v3 = peer_open(65002, PEER_ID, 90);
    v3.version = 3;
    let n = expect_open_rejected(cfg(), v3, 2, 1);
    assert_eq!(n.data, [0, 4]);

    expect_open_rejected(cfg(), peer_open(65003, PEER_ID, 90), 2, 2);
    let internal = FsmConfig { remote_asn: RemoteAsn::Internal, ..cfg() };
    expect_open_rejected(internal, peer_open(65002, PEER_ID, 90), 2, 2);
    let external = FsmConfig { remote_asn: RemoteAsn::External, ..cfg() };
    expect_open_rejected(external, peer_open(65001, PEER_ID, 90), 2, 2);
    // RFC 6793 §4.1: the capability's ASN counts, not AS_TRANS in My AS.
    let trans = FsmConfig { remote_asn: RemoteAsn::Fixed(u32::from(AS_TRANS)), ..cfg() };
    expect_open_rejected(trans, peer_open(4_200_000_002, PEER_ID, 90), 2, 2);

    expect_open_rejected(cfg(), peer_open(65002, Ipv4Addr::UNSPECIFIED, 90), 2, 3);
    // RFC 6286 §2.2: iBGP peers must have different identifiers.
    let ibgp = FsmConfig { remote_asn: RemoteAsn::Internal, ..cfg() };
    expect_open_rejected(ibgp, peer_open(65001, LOCAL_ID, 90), 2, 3);

    expect_open_rejected(cfg(), peer_open(65002, PEER_ID, 1), 2, 6);
    expect_open_rejected(cfg(), peer_open(65002, PEER_ID, 2), 2, 6);

    // No common family: we speak IPv6 only, the peer IPv4 only.
    let v6 = FsmConfig { families: vec![Family::IPV6_UNICAST], ..cfg() };
    let n = expect_open_rejected(v6, peer_open(65002, PEER_ID, 90), 2, 7);
    assert_eq!(n.data, [1, 4, 0, 2, 0, 1]);
}

#[test]
fn open_variants_that_are_accepted() {
    // 4-octet peer ASN via the capability.
    let four = FsmConfig { remote_asn: RemoteAsn::Fixed(4_200_000_002), ..cfg() };
    let actions = establish(&mut Fsm::new(four), peer_open(4_200_000_002, PEER_ID, 90));
    assert_eq!(established(&actions).unwrap().remote_asn, 4_200_000_002);
    // A 2-octet-only peer (no capability).
    let mut old = peer_open(65002, PEER_ID, 90);
    old.capabilities.retain(|c| !matches!(c, Capability::FourOctetAs(_)));
    let n = established(&establish(&mut Fsm::new(cfg()), old)).unwrap().clone();
    assert!(!n.four_octet_as);
    // eBGP peers may share our identifier.
    let actions = establish(&mut Fsm::new(cfg()), peer_open(65002, LOCAL_ID, 90));
    assert!(established(&actions).unwrap().is_ebgp);
    // iBGP with Internal.
    let ibgp = FsmConfig { remote_asn: RemoteAsn::Internal, ..cfg() };
    let actions = establish(&mut Fsm::new(ibgp), peer_open(65001, PEER_ID, 90));
    assert!(!established(&actions).unwrap().is_ebgp);
    // External accepts any other AS.
    let ext = FsmConfig { remote_asn: RemoteAsn::External, ..cfg() };
    establish(&mut Fsm::new(ext), peer_open(64999, PEER_ID, 90));
}

#[test]
fn keepalive_and_hold_timers() {
    let mut fsm = Fsm::new(cfg());
    establish(&mut fsm, peer_open(65002, PEER_ID, 30)); // hold 30, keepalive 10
    assert_eq!(fsm.next_deadline(), Some(t(10.0)));
    let actions = fsm.handle(Event::Tick, t(10.0));
    assert_eq!(sent_kinds(&actions, C1), [MessageType::Keepalive]);
    assert_eq!(fsm.next_deadline(), Some(t(20.0)));
    // An UPDATE sent restarts the KeepaliveTimer.
    fsm.handle(Event::UpdateSent(C1), t(15.0));
    assert!(fsm.handle(Event::Tick, t(20.0)).is_empty());
    assert_eq!(fsm.next_deadline(), Some(t(25.0)));
    // A KEEPALIVE received at 25 moves hold expiry from 30 to 55.
    fsm.handle(Event::Received(C1, Message::Keepalive), t(25.0));
    fsm.handle(Event::Tick, t(25.0));
    fsm.handle(Event::Tick, t(35.0));
    fsm.handle(Event::Tick, t(45.0));
    assert_eq!(fsm.state(), State::Established);
    // ROUTE-REFRESH counts as well.
    let rr = RouteRefresh { afi: 1, subtype: 0, safi: 1 };
    fsm.handle(Event::Received(C1, Message::RouteRefresh(rr)), t(40.0));
    assert_eq!(fsm.state(), State::Established);
    let mut now = 45.0;
    let expired = loop {
        let next = fsm.next_deadline().unwrap();
        // Our writes go out (the SendHoldTimer is not what this is about).
        fsm.handle(Event::SendProgress(C1), next);
        let actions = fsm.handle(Event::Tick, next);
        now += 1.0;
        assert!(now < 200.0);
        if let Some(reason) = down(&actions) {
            break (next, actions.clone(), reason.clone());
        }
    };
    let (at, actions, reason) = expired;
    assert_eq!(at, t(70.0));
    assert_eq!(sent_notification(&actions, C1), Some(Notification::new(4, 0, vec![])));
    assert!(closed(&actions, C1));
    assert!(reason.was_established);
    assert_eq!(reason.text, "Notification sent (Hold Timer Expired)");
    assert_eq!(fsm.state(), State::Idle);
}

#[test]
fn open_sent_hold_timer_expires() {
    let mut fsm = Fsm::new(cfg());
    fsm.handle(Event::ManualStart, t(0.0));
    fsm.handle(Event::TcpConnected(C1), t(1.0));
    assert!(fsm.handle(Event::Tick, t(240.0)).is_empty());
    let actions = fsm.handle(Event::Tick, t(241.0));
    assert_eq!(sent_notification(&actions, C1).map(|n| n.code), Some(4));
    assert_eq!(fsm.state(), State::Idle);
}

#[test]
fn connect_retry_backoff_grows_caps_and_jitters() {
    let mut fsm = Fsm::new(cfg());
    let mut now = t(0.0);
    let actions = fsm.handle(Event::ManualStart, now);
    assert_eq!(actions, [Action::Connect]);
    for (conn, base) in (10..).zip([5u64, 10, 20, 40, 60, 60, 60]) {
        let deadline = fsm.next_deadline().unwrap();
        let delay = deadline - now;
        let base = Duration::from_secs(base);
        assert!(delay <= base && delay >= base.mul_f64(0.75), "{delay:?} vs base {base:?}");
        fsm.handle(Event::TcpFailed(ConnId(conn)), now + Duration::from_millis(100));
        assert_eq!(fsm.state(), State::Active);
        now = deadline;
        assert_eq!(fsm.handle(Event::Tick, now), [Action::Connect]);
        assert_eq!(fsm.state(), State::Connect);
    }
}

#[test]
fn jitter_is_deterministic_per_seed() {
    let deadlines = |seed| {
        let mut fsm = Fsm::new(FsmConfig { jitter_seed: seed, ..cfg() });
        fsm.handle(Event::ManualStart, t(0.0));
        let mut out = Vec::new();
        for _ in 0..6 {
            let d = fsm.next_deadline().unwrap();
            out.push(d);
            fsm.handle(Event::Tick, d);
        }
        out
    };
    assert_eq!(deadlines(42), deadlines(42));
    assert_ne!(deadlines(42), deadlines(43));
}

#[test]
fn restart_after_down_uses_backoff_and_resets_after_established() {
    let mut fsm = Fsm::new(cfg());
    fsm.handle(Event::ManualStart, t(0.0)); // delay base 5 used by the ConnectRetryTimer
    fsm.handle(Event::TcpConnected(C1), t(0.0));
    let actions = fsm.handle(Event::TcpClosed(C1), t(1.0));
    assert_eq!(down(&actions).unwrap().cause, DownCause::ConnectionClosed);
    // Not established yet: the next delay keeps growing (base 10).
    let delay = fsm.next_deadline().unwrap() - t(1.0);
    assert!(delay >= Duration::from_millis(7500) && delay <= Duration::from_secs(10), "{delay:?}");
    let at = fsm.next_deadline().unwrap();
    assert_eq!(fsm.handle(Event::Tick, at), [Action::Connect]);
    // Now establish and lose it: the backoff starts over at 5 s.
    fsm.handle(Event::TcpConnected(C2), at);
    fsm.handle(Event::Received(C2, Message::Open(peer_open(65002, PEER_ID, 90))), at);
    fsm.handle(Event::Received(C2, Message::Keepalive), at);
    assert_eq!(fsm.state(), State::Established);
    let lost = at + Duration::from_secs(100);
    let actions = fsm.handle(Event::TcpFailed(C2), lost);
    let reason = down(&actions).unwrap();
    assert_eq!(reason.cause, DownCause::ConnectionFailed);
    assert!(reason.was_established);
    let delay = fsm.next_deadline().unwrap() - lost;
    assert!(delay >= Duration::from_millis(3750) && delay <= Duration::from_secs(5), "{delay:?}");
}

#[test]
fn passive_never_connects_and_waits_in_active() {
    let mut fsm = Fsm::new(FsmConfig { passive: true, ..cfg() });
    assert!(fsm.handle(Event::ManualStart, t(0.0)).is_empty());
    assert_eq!(fsm.state(), State::Active);
    assert_eq!(fsm.next_deadline(), None);
    assert!(fsm.handle(Event::Tick, t(1000.0)).is_empty());
    let actions = fsm.handle(Event::TcpAccepted(C1), t(1001.0));
    assert_eq!(sent_kinds(&actions, C1), [MessageType::Open]);
    assert_eq!(fsm.state(), State::OpenSent);
    let actions = fsm.handle(Event::TcpClosed(C1), t(1002.0));
    assert!(down(&actions).is_some());
    // Restarts by itself into Active, still without Connect.
    let at = fsm.next_deadline().unwrap();
    assert!(fsm.handle(Event::Tick, at).is_empty());
    assert_eq!(fsm.state(), State::Active);
    // A stray TcpConnected is not ours.
    assert_eq!(fsm.handle(Event::TcpConnected(C2), at), [Action::Close(C2)]);
}

/// Outgoing C1 and incoming C2 both in OpenSent; the OPEN arrives on `open_on`.
fn collision(local_id: Ipv4Addr, open_on: ConnId) -> (Fsm, Vec<Action>) {
    let mut fsm = Fsm::new(FsmConfig { local_id, ..cfg() });
    fsm.handle(Event::ManualStart, t(0.0));
    fsm.handle(Event::TcpConnected(C1), t(0.1));
    fsm.handle(Event::TcpAccepted(C2), t(0.2));
    assert_eq!(fsm.state(), State::OpenSent);
    let open = peer_open(65002, PEER_ID, 90);
    let actions = fsm.handle(Event::Received(open_on, Message::Open(open)), t(1.0));
    (fsm, actions)
}

fn cease7(actions: &[Action], id: ConnId) -> bool {
    sent_notification(actions, id) == Some(Notification::cease(7)) && closed(actions, id)
}

#[test]
fn collision_local_id_higher_keeps_our_connection() {
    let higher = Ipv4Addr::new(10, 0, 0, 9);
    // OPEN on the incoming connection: it loses, the outgoing one waits for its OPEN.
    let (mut fsm, actions) = collision(higher, C2);
    assert!(cease7(&actions, C2), "{actions:?}");
    assert!(!closed(&actions, C1));
    assert!(down(&actions).is_none());
    assert_eq!(fsm.state(), State::OpenSent);
    fsm.handle(Event::Received(C1, Message::Open(peer_open(65002, PEER_ID, 90))), t(2.0));
    let actions = fsm.handle(Event::Received(C1, Message::Keepalive), t(2.0));
    assert!(matches!(actions[..], [Action::Established(C1, _)]));
    // OPEN on the outgoing connection: the incoming one is closed, ours continues.
    let (fsm, actions) = collision(higher, C1);
    assert!(cease7(&actions, C2));
    assert_eq!(sent_kinds(&actions, C1), [MessageType::Keepalive]);
    assert_eq!(fsm.state(), State::OpenConfirm);
}

#[test]
fn collision_local_id_lower_keeps_the_peers_connection() {
    let lower = Ipv4Addr::new(10, 0, 0, 1);
    let (fsm, actions) = collision(lower, C2);
    assert!(cease7(&actions, C1), "{actions:?}");
    assert_eq!(sent_kinds(&actions, C2), [MessageType::Keepalive]);
    assert_eq!(fsm.state(), State::OpenConfirm);
    assert!(down(&actions).is_none());
    let (fsm, actions) = collision(lower, C1);
    assert!(cease7(&actions, C1));
    assert!(!closed(&actions, C2));
    assert_eq!(fsm.state(), State::OpenSent);
}

#[test]
fn our_attempt_still_connecting_yields_to_the_peers_connection() {
    // The peer's connection arrives while ours is in TCP's handshake. Ours is given up: had it
    // gone on, the incoming connection could reach OpenConfirm (the peer then counts it
    // Established) before the peer's OPEN on ours, and §6.8 by identifier (ours is higher
    // here) would close the connection the peer already runs: a flap at every start.
    let mut fsm = Fsm::new(FsmConfig { local_id: Ipv4Addr::new(10, 0, 0, 9), ..cfg() });
    fsm.handle(Event::ManualStart, t(0.0));
    fsm.handle(Event::TcpAccepted(C2), t(0.1));
    fsm.handle(Event::Received(C2, Message::Open(peer_open(65002, PEER_ID, 90))), t(0.2));
    assert_eq!(fsm.state(), State::OpenConfirm);
    assert_eq!(fsm.handle(Event::TcpConnected(C1), t(0.3)), [Action::Close(C1)]);
    let actions = fsm.handle(Event::Received(C2, Message::Keepalive), t(0.4));
    assert!(matches!(actions[..], [Action::Established(C2, _)]), "{actions:?}");
}

#[test]
fn equal_identifiers_break_ties_by_asn() {
    // RFC 6286 §2.3: eBGP peers with equal identifiers; our AS 65001 < 65002 -> peer wins.
    let (_, actions) = collision(PEER_ID, C2);
    assert!(cease7(&actions, C1));
}

#[test]
fn connection_accepted_while_established_is_closed() {
    let mut fsm = Fsm::new(cfg());
    establish(&mut fsm, peer_open(65002, PEER_ID, 90));
    let actions = fsm.handle(Event::TcpAccepted(C2), t(5.0));
    assert!(cease7(&actions, C2));
    assert_eq!(fsm.state(), State::Established);
    assert_eq!(fsm.established().map(|(id, _)| id), Some(C1));
}

#[test]
fn established_closes_the_other_connection() {
    let mut fsm = Fsm::new(cfg());
    fsm.handle(Event::ManualStart, t(0.0));
    fsm.handle(Event::TcpConnected(C1), t(0.0));
    fsm.handle(open_msg(peer_open(65002, PEER_ID, 90)), t(0.0));
    // The incoming connection arrives but its OPEN has not.
    fsm.handle(Event::TcpAccepted(C2), t(0.5));
    let actions = fsm.handle(Event::Received(C1, Message::Keepalive), t(1.0));
    assert!(cease7(&actions, C2));
    assert!(established(&actions).is_some());
    assert!(fsm.handle(Event::TcpClosed(C2), t(1.1)).is_empty());
    assert_eq!(fsm.state(), State::Established);
}

#[test]
fn manual_stop_sends_cease_and_stays_down() {
    let mut fsm = Fsm::new(cfg());
    establish(&mut fsm, peer_open(65002, PEER_ID, 90));
    let stop = Event::ManualStop { subcode: 2, reason: "maintenance".into() };
    let actions = fsm.handle(stop, t(10.0));
    let n = sent_notification(&actions, C1).unwrap();
    assert_eq!((n.code, n.subcode), (6, 2));
    assert_eq!(n.shutdown_communication().as_deref(), Some("maintenance"));
    assert!(closed(&actions, C1));
    let reason = down(&actions).unwrap();
    assert!(reason.was_established);
    assert_eq!(reason.text, "Notification sent (Cease/Administrative Shutdown \"maintenance\")");
    assert_eq!(fsm.state(), State::Idle);
    assert_eq!(fsm.next_deadline(), None);
    // Stopped: incoming connections are refused, late outgoing ones dropped, ticks idle.
    assert_eq!(fsm.handle(Event::TcpAccepted(C2), t(11.0)), [Action::Close(C2)]);
    assert_eq!(fsm.handle(Event::TcpConnected(ConnId(3)), t(11.0)), [Action::Close(ConnId(3))]);
    assert!(fsm.handle(Event::Tick, t(1000.0)).is_empty());
    // A stop while merely connecting has nothing to notify.
    let mut fsm = Fsm::new(cfg());
    fsm.handle(Event::ManualStart, t(0.0));
    let actions = fsm.handle(Event::ManualStop { subcode: 3, reason: String::new() }, t(1.0));
    assert!(actions.is_empty());
    assert_eq!(fsm.state(), State::Idle);
    assert_eq!(fsm.next_deadline(), None);
    // And ManualStart brings it back.
    assert_eq!(fsm.handle(Event::ManualStart, t(2.0)), [Action::Connect]);
}

#[test]
fn unexpected_messages_are_fsm_errors() {
    let rr = RouteRefresh { afi: 1, subtype: 0, safi: 1 };
    // OpenSent
    for msg in [Message::Keepalive, Message::Update(&[0, 0, 0, 0]), Message::RouteRefresh(rr)] {
        let mut fsm = Fsm::new(cfg());
        fsm.handle(Event::ManualStart, t(0.0));
        fsm.handle(Event::TcpConnected(C1), t(0.0));
        let actions = fsm.handle(Event::Received(C1, msg), t(1.0));
        assert_eq!(sent_notification(&actions, C1), Some(Notification::new(5, 1, vec![])));
        assert_eq!(fsm.state(), State::Idle);
    }
    // OpenConfirm
    let open = || peer_open(65002, PEER_ID, 90);
    for msg in [Message::Open(open()), Message::Update(&[0, 0, 0, 0]), Message::RouteRefresh(rr)] {
        let mut fsm = Fsm::new(cfg());
        fsm.handle(Event::ManualStart, t(0.0));
        fsm.handle(Event::TcpConnected(C1), t(0.0));
        fsm.handle(open_msg(open()), t(0.0));
        let actions = fsm.handle(Event::Received(C1, msg), t(1.0));
        assert_eq!(sent_notification(&actions, C1), Some(Notification::new(5, 2, vec![])));
        assert!(down(&actions).is_some());
    }
    // Established
    let mut fsm = Fsm::new(cfg());
    establish(&mut fsm, open());
    let actions = fsm.handle(open_msg(open()), t(1.0));
    assert_eq!(sent_notification(&actions, C1), Some(Notification::new(5, 3, vec![])));
    let reason = down(&actions).unwrap();
    assert!(reason.text.starts_with(
        "Notification sent (Neighbor Events Error/Receive Unexpected Message in Established State)"
    ));
}

#[test]
fn notification_received_takes_the_session_down() {
    let mut fsm = Fsm::new(cfg());
    establish(&mut fsm, peer_open(65002, PEER_ID, 90));
    let n = Notification::cease_with_communication(4, "bye");
    let actions = fsm.handle(Event::Received(C1, Message::Notification(n.clone())), t(3.0));
    assert!(sent(&actions, C1).is_empty(), "no reply to a NOTIFICATION");
    assert!(closed(&actions, C1));
    let reason = down(&actions).unwrap();
    assert_eq!(reason.cause, DownCause::NotificationReceived(n));
    assert_eq!(reason.text, "Notification received (Cease/Administrative Reset \"bye\")");
    assert_eq!(fsm.state(), State::Idle);
    assert!(fsm.next_deadline().is_some(), "restarts by itself");
}

#[test]
fn fatal_update_error_resets_the_session() {
    let mut fsm = Fsm::new(cfg());
    establish(&mut fsm, peer_open(65002, PEER_ID, 90));
    let n = Notification::new(3, 1, vec![]);
    let actions = fsm.handle(Event::FatalUpdateError(C1, n.clone()), t(3.0));
    assert_eq!(sent_notification(&actions, C1), Some(n.clone()));
    let reason = down(&actions).unwrap();
    assert_eq!(reason.cause, DownCause::NotificationSent(n));
    assert!(reason.was_established);
}

#[test]
fn events_for_unknown_connections_are_ignored() {
    let mut fsm = Fsm::new(cfg());
    establish(&mut fsm, peer_open(65002, PEER_ID, 90));
    assert!(fsm.handle(Event::TcpClosed(ConnId(99)), t(1.0)).is_empty());
    assert!(fsm.handle(Event::Received(ConnId(99), Message::Keepalive), t(1.0)).is_empty());
    assert!(fsm.handle(Event::UpdateSent(ConnId(99)), t(1.0)).is_empty());
    assert_eq!(fsm.state(), State::Established);
}

#[test]
fn second_incoming_connection_replaces_the_first() {
    let mut fsm = Fsm::new(FsmConfig { passive: true, ..cfg() });
    fsm.handle(Event::ManualStart, t(0.0));
    fsm.handle(Event::TcpAccepted(C1), t(1.0));
    let actions = fsm.handle(Event::TcpAccepted(C2), t(2.0));
    assert!(cease7(&actions, C1));
    assert_eq!(sent_kinds(&actions, C2), [MessageType::Open]);
    assert!(down(&actions).is_none());
    assert_eq!(fsm.state(), State::OpenSent);
}

#[test]
fn config_validation() {
    assert!(cfg().validate().is_ok());
    assert!(FsmConfig { hold_time: Duration::ZERO, ..cfg() }.validate().is_ok());
    assert!(FsmConfig { hold_time: Duration::from_secs(2), ..cfg() }.validate().is_err());
    assert!(FsmConfig { hold_time: Duration::from_secs(70_000), ..cfg() }.validate().is_err());
    assert!(FsmConfig { local_id: Ipv4Addr::UNSPECIFIED, ..cfg() }.validate().is_err());
    assert!(FsmConfig { connect_retry: Duration::ZERO, ..cfg() }.validate().is_err());
}

#[test]
fn idle_after_down_still_accepts_the_peer() {
    let mut fsm = Fsm::new(cfg());
    establish(&mut fsm, peer_open(65002, PEER_ID, 90));
    fsm.handle(Event::TcpClosed(C1), t(1.0));
    assert_eq!(fsm.state(), State::Idle);
    let restart = fsm.next_deadline().unwrap();
    let actions = fsm.handle(Event::TcpAccepted(C2), t(1.5));
    assert_eq!(sent_kinds(&actions, C2), [MessageType::Open]);
    assert_eq!(fsm.state(), State::OpenSent);
    // The restart timer is gone: only the OpenSent hold timer runs.
    assert_eq!(fsm.next_deadline(), Some(t(241.5)));
    assert!(fsm.handle(Event::Tick, restart).is_empty());
}

// ---- RFC 9687 SendHoldTimer ----

#[test]
fn send_hold_timer_drops_a_peer_that_takes_no_data() {
    let mut fsm = Fsm::new(cfg());
    // Hold time 9 s: SendHoldTime 18 s by default.
    establish(&mut fsm, peer_open(65002, PEER_ID, 9));
    // The peer keeps sending (its KEEPALIVEs restart our HoldTimer) but reads nothing: our
    // writes made their last progress at time 0.
    for at in 1..18 {
        let at = f64::from(at);
        fsm.handle(Event::Received(C1, Message::Keepalive), t(at));
        let actions = fsm.handle(Event::Tick, t(at));
        assert!(down(&actions).is_none(), "at {at}: {actions:?}");
    }
    assert_eq!(fsm.next_deadline().map(|d| d <= t(18.0)), Some(true));
    let actions = fsm.handle(Event::Tick, t(18.0));
    let n = sent_notification(&actions, C1).unwrap();
    assert_eq!((n.code, n.subcode), (8, 0));
    assert!(closed(&actions, C1));
    let reason = down(&actions).unwrap();
    assert!(reason.was_established);
    assert_eq!(
        reason.text,
        "Notification sent (Send Hold Timer Expired): the peer took none of our data for 18 s"
    );
    // Down like any other error: Idle, and a restart after the backoff.
    assert_eq!(fsm.state(), State::Idle);
    assert!(fsm.next_deadline().is_some());
}

#[test]
fn send_progress_keeps_the_session() {
    let mut fsm = Fsm::new(cfg());
    establish(&mut fsm, peer_open(65002, PEER_ID, 9));
    for at in 1..100 {
        let at = f64::from(at);
        fsm.handle(Event::Received(C1, Message::Keepalive), t(at));
        fsm.handle(Event::SendProgress(C1), t(at));
        let actions = fsm.handle(Event::Tick, t(at));
        assert!(down(&actions).is_none(), "at {at}: {actions:?}");
    }
    assert_eq!(fsm.state(), State::Established);
}

#[test]
fn send_hold_time_settings() {
    // Fixed: that long whatever the hold time; Off: never.
    let fixed = FsmConfig { send_hold_time: SendHoldTime::Fixed(Duration::from_secs(5)), ..cfg() };
    let mut fsm = Fsm::new(fixed);
    establish(&mut fsm, peer_open(65002, PEER_ID, 90));
    assert!(down(&fsm.handle(Event::Tick, t(4.9))).is_none());
    assert!(down(&fsm.handle(Event::Tick, t(5.0))).is_some());

    let off = FsmConfig { send_hold_time: SendHoldTime::Off, ..cfg() };
    let mut fsm = Fsm::new(off);
    establish(&mut fsm, peer_open(65002, PEER_ID, 9));
    for at in 1..100 {
        fsm.handle(Event::Received(C1, Message::Keepalive), t(f64::from(at)));
        assert!(down(&fsm.handle(Event::Tick, t(f64::from(at)))).is_none());
    }
    // Twice the hold time, none with a hold time of zero.
    assert_eq!(
        SendHoldTime::TwiceHoldTime.for_hold_time(Duration::from_secs(90)),
        Some(Duration::from_secs(180))
    );
    assert_eq!(SendHoldTime::TwiceHoldTime.for_hold_time(Duration::ZERO), None);
    // In OpenSent (no hold time negotiated yet): twice its 4 minutes.
    let mut fsm = Fsm::new(cfg());
    fsm.handle(Event::ManualStart, t(0.0));
    fsm.handle(Event::TcpConnected(C1), t(0.0));
    let conn = fsm.conns.first().unwrap();
    assert_eq!(conn.send_hold_deadline, Some(t(480.0)));
}

// ---- RFC 7607, minimum hold time ----

#[test]
fn peer_as_zero_is_refused() {
    let ext = FsmConfig { remote_asn: RemoteAsn::External, ..cfg() };
    let n = expect_open_rejected(ext.clone(), peer_open(0, PEER_ID, 90), 2, 2);
    assert!(n.data.is_empty());
    // Zero in the 4-octet capability, a valid My AS.
    let mut open = peer_open(65002, PEER_ID, 90);
    open.capabilities.retain(|c| !matches!(c, Capability::FourOctetAs(_)));
    open.capabilities.push(Capability::FourOctetAs(0));
    expect_open_rejected(ext.clone(), open, 2, 2);
    // Zero in My AS beside a valid capability.
    let mut open = peer_open(65002, PEER_ID, 90);
    open.my_as = 0;
    expect_open_rejected(ext, open, 2, 2);
}

#[test]
fn minimum_hold_time_refuses_shorter_and_zero() {
    let min = FsmConfig { minimum_hold_time: Duration::from_secs(6), ..cfg() };
    expect_open_rejected(min.clone(), peer_open(65002, PEER_ID, 3), 2, 6);
    expect_open_rejected(min.clone(), peer_open(65002, PEER_ID, 0), 2, 6);
    establish(&mut Fsm::new(min.clone()), peer_open(65002, PEER_ID, 6));
    // We propose no hold time ourselves: nothing to protect.
    let ours_zero = FsmConfig { hold_time: Duration::ZERO, ..min };
    establish(&mut Fsm::new(ours_zero), peer_open(65002, PEER_ID, 0));
}

// ---- max-prefix ----

#[test]
fn max_prefix_cease_holds_down_then_restarts() {
    let mut fsm = Fsm::new(cfg());
    establish(&mut fsm, peer_open(65002, PEER_ID, 90));
    let event = Event::MaxPrefixExceeded {
        reason: "1001 prefixes, more than 1000".into(),
        restart_after: Some(Duration::from_secs(30)),
    };
    let actions = fsm.handle(event, t(10.0));
    let n = sent_notification(&actions, C1).unwrap();
    // RFC 4486 §4: Cease, Maximum Number of Prefixes Reached.
    assert_eq!((n.code, n.subcode), (6, 1));
    assert!(closed(&actions, C1));
    assert_eq!(
        down(&actions).unwrap().text,
        "Notification sent (Cease/Maximum Number of Prefixes Reached): 1001 prefixes, more than \
         1000"
    );
    assert_eq!(fsm.held_down_until(), Some(t(40.0)));
    assert_eq!(fsm.next_deadline(), Some(t(40.0)));
    // Held down: the peer is refused, nothing starts before the time.
    assert_eq!(fsm.handle(Event::TcpAccepted(C2), t(20.0)), [Action::Close(C2)]);
    assert!(fsm.handle(Event::Tick, t(39.0)).is_empty());
    assert_eq!(fsm.handle(Event::Tick, t(40.0)), [Action::Connect]);
    assert_eq!(fsm.held_down_until(), None);
    assert_eq!(fsm.state(), State::Connect);
}

#[test]
fn max_prefix_without_restart_stays_down_until_started() {
    let mut fsm = Fsm::new(cfg());
    establish(&mut fsm, peer_open(65002, PEER_ID, 90));
    let event = Event::MaxPrefixExceeded { reason: String::new(), restart_after: None };
    fsm.handle(event, t(10.0));
    assert_eq!(fsm.next_deadline(), None);
    assert!(fsm.handle(Event::Tick, t(10_000.0)).is_empty());
    assert_eq!(fsm.handle(Event::ManualStart, t(10_001.0)), [Action::Connect]);
}

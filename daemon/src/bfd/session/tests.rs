//! The session with a fake clock: `now` is a base instant plus whatever the test says.

use super::*;
use crate::bfd::auth::Key;
use crate::bfd::packet::{AuthSection, AuthType};

const MS: Duration = Duration::from_millis(1);
const LOCAL: u32 = 0x1111;
const REMOTE: u32 = 0x2222;

fn config(tx_ms: u64, rx_ms: u64, mult: u8) -> SessionConfig {
    SessionConfig {
        desired_min_tx: MS * tx_ms as u32,
        required_min_rx: MS * rx_ms as u32,
        detect_mult: mult,
        passive: false,
    }
}

/// A packet from the peer.
fn peer(state: State, your: u32, tx_ms: u32, rx_ms: u32, mult: u8) -> ControlPacket {
    ControlPacket {
        diagnostic: Diagnostic::None,
        state,
        poll: false,
        final_bit: false,
        control_plane_independent: false,
        demand: false,
        detect_mult: mult,
        my_discriminator: REMOTE,
        your_discriminator: your,
        desired_min_tx_us: tx_ms * 1000,
        required_min_rx_us: rx_ms * 1000,
        required_min_echo_rx_us: 0,
        auth: None,
    }
}

fn sent(actions: &[Action]) -> Vec<ControlPacket> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Send(p) => Some(*p),
            _ => None,
        })
        .collect()
}

fn changes(actions: &[Action]) -> Vec<(State, State, Diagnostic, bool)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::StateChanged { from, to, diagnostic, remote_admin_down } => {
                Some((*from, *to, *diagnostic, *remote_admin_down))
            }
            _ => None,
        })
        .collect()
}

/// Brings a 50 ms × 3 session Up against a peer with the same timers; returns it at `t0`.
fn up_session(t0: Instant) -> Session {
    let mut s = Session::new(config(50, 50, 3), LOCAL, 7, t0);
    s.handle(Event::Tick, t0);
    s.handle(Event::Received(peer(State::Down, 0, 1000, 50, 3)), t0);
    assert_eq!(s.state(), State::Init);
    let a = s.handle(Event::Received(peer(State::Up, LOCAL, 1000, 50, 3)), t0);
    assert_eq!(s.state(), State::Up);
    // The peer answers our Poll (our TX went from 1 s to 50 ms) and polls its own change.
    let p = sent(&a);
    assert!(p.iter().all(|p| p.poll), "{p:?}");
    let mut fin = peer(State::Up, LOCAL, 50, 50, 3);
    fin.final_bit = true;
    s.handle(Event::Received(fin), t0);
    assert!(!s.polling());
    s
}

#[test]
fn an_active_session_starts_sending_down_packets_at_one_second() {
    let t0 = Instant::now();
    let mut s = Session::new(config(10, 10, 3), LOCAL, 1, t0);
    assert_eq!(s.next_deadline(), Some(t0));
    let p = sent(&s.handle(Event::Tick, t0));
    assert_eq!(p.len(), 1);
    let p = p[0];
    assert_eq!((p.state, p.my_discriminator, p.your_discriminator), (State::Down, LOCAL, 0));
    // RFC 5880 §6.8.3: at least 1 s advertised while not Up, whatever the profile says.
    assert_eq!(p.desired_min_tx_us, 1_000_000);
    assert_eq!(p.required_min_rx_us, 10_000);
    assert_eq!(p.detect_mult, 3);
    assert_eq!(p.required_min_echo_rx_us, 0);
    // The next packet comes 750-900 ms later.
    let next = s.next_deadline().unwrap() - t0;
    assert!(next >= MS * 750 && next <= MS * 900, "{next:?}");
}

#[test]
fn a_passive_session_is_silent_until_it_hears_the_peer() {
    let t0 = Instant::now();
    let mut s = Session::new(SessionConfig { passive: true, ..config(50, 50, 3) }, LOCAL, 1, t0);
    assert_eq!(s.next_deadline(), None);
    assert!(sent(&s.handle(Event::Tick, t0 + MS * 5000)).is_empty());
    let a = s.handle(Event::Received(peer(State::Down, 0, 1000, 50, 3)), t0 + MS * 5000);
    assert_eq!(changes(&a), vec![(State::Down, State::Init, Diagnostic::None, false)]);
    let p = sent(&a);
    assert_eq!(p.len(), 1);
    assert_eq!((p[0].state, p[0].your_discriminator), (State::Init, REMOTE));
    // The peer goes quiet: after the Detection Time it is forgotten and we are silent again.
    let t = t0 + MS * 5000 + MS * 3000;
    let a = s.handle(Event::Tick, t);
    assert_eq!(s.remote_discriminator(), 0);
    assert_eq!(
        changes(&a),
        vec![(State::Init, State::Down, Diagnostic::ControlDetectionTimeExpired, false)]
    );
    assert_eq!(s.next_deadline(), None);
}

#[test]
fn three_way_handshake_down_init_up() {
    let t0 = Instant::now();
    let mut s = Session::new(config(50, 50, 3), LOCAL, 1, t0);
    s.handle(Event::Tick, t0);
    let a = s.handle(Event::Received(peer(State::Down, 0, 1000, 50, 3)), t0);
    assert_eq!(changes(&a), vec![(State::Down, State::Init, Diagnostic::None, false)]);
    assert_eq!(sent(&a).len(), 1, "a state change is announced at once");
    let a = s.handle(Event::Received(peer(State::Up, LOCAL, 1000, 50, 3)), t0);
    assert_eq!(changes(&a), vec![(State::Init, State::Up, Diagnostic::None, false)]);
    let p = sent(&a);
    assert_eq!(p.len(), 1, "one packet: the Up announcement carries the Poll");
    assert_eq!(p[0].state, State::Up);
    assert_eq!(p[0].desired_min_tx_us, 50_000, "the configured TX once Up");
    assert!(p[0].poll);
    assert_eq!(s.counters().session_up, 1);
}

#[test]
fn down_receiving_init_goes_straight_up() {
    let t0 = Instant::now();
    let mut s = Session::new(config(50, 50, 3), LOCAL, 1, t0);
    let a = s.handle(Event::Received(peer(State::Init, LOCAL, 1000, 50, 3)), t0);
    assert_eq!(changes(&a), vec![(State::Down, State::Up, Diagnostic::None, false)]);
}

#[test]
fn ignored_combinations_change_nothing() {
    let t0 = Instant::now();
    let mut s = Session::new(config(50, 50, 3), LOCAL, 1, t0);
    // Down + Up: stays Down (the peer must see us first).
    assert!(changes(&s.handle(Event::Received(peer(State::Up, LOCAL, 1000, 50, 3)), t0)).is_empty());
    assert_eq!(s.state(), State::Down);
    // Down + AdminDown: stays Down.
    assert!(
        changes(&s.handle(Event::Received(peer(State::AdminDown, 0, 1000, 50, 3)), t0)).is_empty()
    );
    // Init + Down: stays Init.
    s.handle(Event::Received(peer(State::Down, 0, 1000, 50, 3)), t0);
    assert_eq!(s.state(), State::Init);
    assert!(changes(&s.handle(Event::Received(peer(State::Down, 0, 1000, 50, 3)), t0)).is_empty());
    // Up + Init / Up + Up: stays Up.
    s.handle(Event::Received(peer(State::Up, LOCAL, 1000, 50, 3)), t0);
    assert!(changes(&s.handle(Event::Received(peer(State::Init, LOCAL, 50, 50, 3)), t0)).is_empty());
    assert!(changes(&s.handle(Event::Received(peer(State::Up, LOCAL, 50, 50, 3)), t0)).is_empty());
    assert_eq!(s.state(), State::Up);
}

#[test]
fn init_goes_up_on_init_too() {
    let t0 = Instant::now();
    let mut s = Session::new(config(50, 50, 3), LOCAL, 1, t0);
    s.handle(Event::Received(peer(State::Down, 0, 1000, 50, 3)), t0);
    let a = s.handle(Event::Received(peer(State::Init, LOCAL, 1000, 50, 3)), t0);
    assert_eq!(changes(&a), vec![(State::Init, State::Up, Diagnostic::None, false)]);
}

#[test]
fn peer_signalling_down_takes_us_down_with_diag_3() {
    let t0 = Instant::now();
    let mut s = up_session(t0);
    let a = s.handle(Event::Received(peer(State::Down, LOCAL, 1000, 50, 3)), t0 + MS);
    assert_eq!(
        changes(&a),
        vec![(State::Up, State::Down, Diagnostic::NeighborSignaledSessionDown, false)]
    );
    let p = sent(&a);
    assert_eq!(p.len(), 1);
    assert_eq!((p[0].state, p[0].diagnostic.code()), (State::Down, 3));
    assert_eq!(p[0].desired_min_tx_us, 1_000_000, "back to 1 s when not Up");
    assert_eq!(s.counters().session_down, 1);
}

#[test]
fn peer_admin_down_is_flagged_so_clients_stay_up() {
    let t0 = Instant::now();
    let mut s = up_session(t0);
    let mut admin = peer(State::AdminDown, LOCAL, 1000, 50, 3);
    admin.diagnostic = Diagnostic::AdministrativelyDown;
    let a = s.handle(Event::Received(admin), t0 + MS);
    // RFC 5882 §3.2: the change is reported with remote_admin_down so BGP is not torn down.
    assert_eq!(
        changes(&a),
        vec![(State::Up, State::Down, Diagnostic::NeighborSignaledSessionDown, true)]
    );
    assert_eq!(s.remote_diagnostic(), Diagnostic::AdministrativelyDown);
    // Init + AdminDown goes Down too.
    let mut s = Session::new(config(50, 50, 3), LOCAL, 1, t0);
    s.handle(Event::Received(peer(State::Down, 0, 1000, 50, 3)), t0);
    let a = s.handle(Event::Received(peer(State::AdminDown, LOCAL, 1000, 50, 3)), t0);
    assert_eq!(
        changes(&a),
        vec![(State::Init, State::Down, Diagnostic::NeighborSignaledSessionDown, true)]
    );
}

#[test]
fn detection_time_expiry_takes_up_down_with_diag_1() {
    let t0 = Instant::now();
    let mut s = up_session(t0);
    // Detection: the peer's mult 3 × max(our RX 50, its TX 50) = 150 ms after its last packet.
    assert_eq!(s.detection_time(), Some(MS * 150));
    let last = t0 + MS * 10;
    s.handle(Event::Received(peer(State::Up, LOCAL, 50, 50, 3)), last);
    // Periodic sends do not disturb detection.
    let mut t = last;
    while t < last + MS * 149 {
        t += MS;
        let a = s.handle(Event::Tick, t);
        assert!(changes(&a).is_empty(), "down too early at {:?}", t - last);
    }
    let a = s.handle(Event::Tick, last + MS * 150);
    assert_eq!(
        changes(&a),
        vec![(State::Up, State::Down, Diagnostic::ControlDetectionTimeExpired, false)]
    );
    assert_eq!(s.remote_discriminator(), 0, "RFC 5880 §6.8.1: forgotten after detection");
    let p = sent(&a);
    assert_eq!((p[0].state, p[0].diagnostic.code(), p[0].your_discriminator), (State::Down, 1, 0));
}

/// The node froze past the detection time (its thread woke 700 ms late): the peer gets one
/// more detection time, from the wake, to be heard; a packet in it keeps the session Up and
/// makes the next stall excusable again; a second stall in one silence is not excused.
#[test]
fn a_local_stall_measures_the_detection_time_again_once_per_silence() {
    let t0 = Instant::now();
    let mut s = up_session(t0);
    s.handle(Event::Received(peer(State::Up, LOCAL, 50, 50, 3)), t0);
    let woke = t0 + MS * 700;
    assert!(s.excuse_local_stall(woke));
    assert!(changes(&s.handle(Event::Tick, woke)).is_empty());
    assert!(!s.excuse_local_stall(woke), "nothing expired: nothing to excuse");
    // The peer is heard: the silence ends, and a later stall is excused again.
    let heard = woke + MS * 20;
    s.handle(Event::Received(peer(State::Up, LOCAL, 50, 50, 3)), heard);
    let woke_again = heard + MS * 500;
    assert!(s.excuse_local_stall(woke_again));
    // Not heard this time: the next stall in the same silence is the peer's, and it goes Down
    // one detection time after the wake.
    let later = woke_again + MS * 400;
    assert!(!s.excuse_local_stall(later));
    assert_eq!(
        changes(&s.handle(Event::Tick, later)),
        vec![(State::Up, State::Down, Diagnostic::ControlDetectionTimeExpired, false)]
    );
}

#[test]
fn detection_in_init_also_goes_down() {
    let t0 = Instant::now();
    let mut s = Session::new(config(50, 50, 3), LOCAL, 1, t0);
    s.handle(Event::Received(peer(State::Down, 0, 1000, 50, 3)), t0);
    // Not Up: the peer sends at 1 s, so detection is 3 s.
    assert_eq!(s.detection_time(), Some(MS * 3000));
    assert!(changes(&s.handle(Event::Tick, t0 + MS * 2999)).is_empty());
    let a = s.handle(Event::Tick, t0 + MS * 3000);
    assert_eq!(
        changes(&a),
        vec![(State::Init, State::Down, Diagnostic::ControlDetectionTimeExpired, false)]
    );
}

#[test]
fn negotiation_takes_the_slower_of_each_pair() {
    let t0 = Instant::now();
    // We want to send every 10 ms and receive every 20 ms; the peer sends every 100 ms and
    // can receive only every 300 ms, with multiplier 5.
    let mut s = Session::new(config(10, 20, 3), LOCAL, 1, t0);
    s.handle(Event::Received(peer(State::Down, 0, 1000, 300, 5)), t0);
    s.handle(Event::Received(peer(State::Up, LOCAL, 1000, 300, 5)), t0);
    let mut fin = peer(State::Up, LOCAL, 100, 300, 5);
    fin.final_bit = true;
    s.handle(Event::Received(fin), t0);
    // TX: max(our desired 10, its required 300).
    assert_eq!(s.transmit_interval(), Some(MS * 300));
    // Detection: its mult 5 × max(our required 20, its desired 100).
    assert_eq!(s.detection_time(), Some(MS * 500));
    // The peer may speed us up by lowering its Required Min RX: the next packet moves earlier.
    let t1 = t0 + MS * 5;
    s.handle(Event::Received(peer(State::Up, LOCAL, 100, 15, 5)), t1);
    assert_eq!(s.transmit_interval(), Some(MS * 15));
    assert!(s.next_deadline().unwrap() <= t1 + MS * 15);
}

#[test]
fn peer_requiring_no_packets_stops_periodic_transmission() {
    let t0 = Instant::now();
    let mut s = Session::new(config(50, 50, 3), LOCAL, 1, t0);
    // RFC 5880 §6.8.7: MUST NOT transmit periodically while bfd.RemoteMinRxInterval is zero.
    s.handle(Event::Received(peer(State::Down, 0, 1000, 0, 3)), t0);
    assert_eq!(s.transmit_interval(), None);
    assert!(sent(&s.handle(Event::Tick, t0 + MS * 2000)).is_empty());
}

#[test]
fn poll_bit_is_answered_at_once_with_final_and_never_both() {
    let t0 = Instant::now();
    let mut s = up_session(t0);
    // We are polling (timer change) and the peer polls us at the same time.
    s.handle(Event::Reconfigure(config(100, 50, 3)), t0 + MS);
    assert!(s.polling());
    let mut poll = peer(State::Up, LOCAL, 50, 50, 3);
    poll.poll = true;
    let p = sent(&s.handle(Event::Received(poll), t0 + MS * 2));
    assert_eq!(p.len(), 1);
    assert!(p[0].final_bit && !p[0].poll, "F answers, P waits: {:?}", p[0]);
    // Our own Poll continues on the next periodic packet.
    let next = s.next_deadline().unwrap();
    let p = sent(&s.handle(Event::Tick, next));
    assert!(p[0].poll && !p[0].final_bit);
}

#[test]
fn raising_tx_waits_for_the_final() {
    let t0 = Instant::now();
    let mut s = up_session(t0);
    assert_eq!(s.transmit_interval(), Some(MS * 50));
    let a = s.handle(Event::Reconfigure(config(300, 50, 3)), t0 + MS);
    let p = sent(&a);
    assert_eq!(p.len(), 1, "the Poll goes out at once");
    assert!(p[0].poll);
    assert_eq!(p[0].desired_min_tx_us, 300_000, "the new value is advertised");
    // RFC 5880 §6.8.3: the actual interval stays 50 ms until the Final.
    assert_eq!(s.transmit_interval(), Some(MS * 50));
    // Every packet of the sequence carries P.
    for _ in 0..3 {
        let next = s.next_deadline().unwrap();
        let p = sent(&s.handle(Event::Tick, next));
        assert!(p[0].poll);
    }
    let mut fin = peer(State::Up, LOCAL, 50, 50, 3);
    fin.final_bit = true;
    s.handle(Event::Received(fin), t0 + MS * 200);
    assert!(!s.polling());
    assert_eq!(s.transmit_interval(), Some(MS * 300));
    let next = s.next_deadline().unwrap();
    assert!(!sent(&s.handle(Event::Tick, next))[0].poll, "P stops after the Final");
    assert_eq!(s.state(), State::Up, "no flap");
}

#[test]
fn lowering_rx_keeps_the_old_detection_time_until_the_final() {
    let t0 = Instant::now();
    let mut s = Session::new(config(50, 300, 3), LOCAL, 1, t0);
    s.handle(Event::Received(peer(State::Down, 0, 1000, 50, 3)), t0);
    s.handle(Event::Received(peer(State::Up, LOCAL, 1000, 50, 3)), t0);
    let mut fin = peer(State::Up, LOCAL, 50, 50, 3);
    fin.final_bit = true;
    s.handle(Event::Received(fin), t0);
    assert_eq!(s.detection_time(), Some(MS * 900));
    s.handle(Event::Reconfigure(config(50, 50, 3)), t0 + MS);
    // Still 900 ms: the peer has not yet confirmed it will send faster.
    s.handle(Event::Received(peer(State::Up, LOCAL, 50, 50, 3)), t0 + MS * 2);
    assert_eq!(s.detection_time(), Some(MS * 900));
    let mut fin = peer(State::Up, LOCAL, 50, 50, 3);
    fin.final_bit = true;
    s.handle(Event::Received(fin), t0 + MS * 3);
    assert_eq!(s.detection_time(), Some(MS * 150));
}

#[test]
fn timer_change_while_down_needs_no_poll() {
    let t0 = Instant::now();
    let mut s = Session::new(config(50, 50, 3), LOCAL, 1, t0);
    let a = s.handle(Event::Reconfigure(config(50, 20, 5)), t0);
    assert!(!s.polling());
    assert!(sent(&a).is_empty());
    let p = sent(&s.handle(Event::Tick, t0));
    assert_eq!((p[0].required_min_rx_us, p[0].detect_mult, p[0].poll), (20_000, 5, false));
}

#[test]
fn jitter_stays_within_75_to_90_percent() {
    let t0 = Instant::now();
    for mult in [1u8, 3] {
        let mut s = Session::new(config(10, 10, mult), LOCAL, 0xdead_beef, t0);
        s.handle(Event::Received(peer(State::Init, LOCAL, 10, 10, 3)), t0);
        let mut fin = peer(State::Up, LOCAL, 10, 10, 3);
        fin.final_bit = true;
        let mut now = t0;
        s.handle(Event::Received(fin), now);
        let (mut low, mut high) = (Duration::MAX, Duration::ZERO);
        for _ in 0..2000 {
            let next = s.next_deadline().unwrap();
            // Keep the peer alive so detection never fires.
            s.handle(Event::Received(peer(State::Up, LOCAL, 10, 10, 3)), now);
            let gap = next - now;
            low = low.min(gap);
            high = high.max(gap);
            now = next;
            assert_eq!(sent(&s.handle(Event::Tick, now)).len(), 1);
        }
        let interval = MS * 10;
        assert!(low >= interval * 3 / 4, "mult {mult}: {low:?}");
        assert!(high <= interval * 9 / 10, "mult {mult}: {high:?}");
        assert!(high - low > MS, "the jitter actually varies: {low:?}..{high:?}");
    }
}

#[test]
fn admin_down_and_back() {
    let t0 = Instant::now();
    let mut s = up_session(t0);
    let a = s.handle(Event::AdminDown, t0 + MS);
    assert_eq!(
        changes(&a),
        vec![(State::Up, State::AdminDown, Diagnostic::AdministrativelyDown, false)]
    );
    assert_eq!((sent(&a)[0].state, sent(&a)[0].diagnostic.code()), (State::AdminDown, 7));
    // Packets from the peer are discarded while AdminDown.
    s.handle(Event::Received(peer(State::Init, LOCAL, 50, 50, 3)), t0 + MS * 2);
    assert_eq!(s.state(), State::AdminDown);
    assert_eq!(s.next_deadline().map(|d| d > t0 + MS * 500), Some(true), "1 s TX, no detection");
    let a = s.handle(Event::AdminUp, t0 + MS * 3);
    assert_eq!(changes(&a)[0].1, State::Down);
    s.handle(Event::Received(peer(State::Init, LOCAL, 1000, 50, 3)), t0 + MS * 4);
    assert_eq!(s.state(), State::Up);
}

fn discards(actions: &[Action]) -> Vec<Discard> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Discarded(d) => Some(*d),
            _ => None,
        })
        .collect()
}

#[test]
fn an_up_session_ignores_a_down_without_its_discriminator() {
    let t0 = Instant::now();
    let mut s = up_session(t0);
    let deadline = s.next_deadline();
    let detection = s.detection_time();
    // A stranger forging the peer's address cannot know our discriminator: its Down (or
    // AdminDown) carries zero, and changes nothing — not even the detection timer.
    for state in [State::Down, State::AdminDown] {
        let a = s.handle(Event::Received(peer(state, 0, 1000, 1000, 1)), t0 + MS);
        assert_eq!(discards(&a), vec![Discard::ZeroDiscriminatorWhileUp(state)]);
        assert!(changes(&a).is_empty() && sent(&a).is_empty(), "{a:?}");
    }
    assert_eq!(
        (s.state(), s.next_deadline(), s.detection_time()),
        (State::Up, deadline, detection)
    );
    assert_eq!(s.counters().control_discarded, 2);
    // Nor does a packet naming another session.
    let a = s.handle(Event::Received(peer(State::Down, LOCAL + 1, 50, 50, 3)), t0 + MS);
    assert_eq!(discards(&a), vec![Discard::NotOurDiscriminator(LOCAL + 1)]);
    // The peer's real Down carries our discriminator and is obeyed.
    let a = s.handle(Event::Received(peer(State::Down, LOCAL, 1000, 50, 3)), t0 + 2 * MS);
    assert_eq!(changes(&a).len(), 1);
    // A peer that lost us (its Detection Time passed, so it sends zero) is heard again once our
    // own Detection Time has taken the session down.
    let mut s = up_session(t0);
    let lost = peer(State::Down, 0, 1000, 50, 3);
    assert!(changes(&s.handle(Event::Received(lost), t0 + MS)).is_empty());
    let expired = s.next_deadline().unwrap().max(t0 + 150 * MS);
    s.handle(Event::Tick, expired);
    assert_eq!(s.state(), State::Down);
    s.handle(Event::Received(lost), expired + MS);
    assert_eq!(s.state(), State::Init);
}

fn key(auth_type: AuthType, secret: &str) -> Authentication {
    Authentication { auth_type, key_id: 1, key: Key::new(auth_type, secret.as_bytes()).unwrap() }
}

/// Two sessions wired to each other, stepped with a fake clock for `ms` milliseconds; every
/// packet one sends the other receives at once. Returns what each side discarded.
fn run_pair(
    a: &mut Session,
    b: &mut Session,
    t0: Instant,
    ms: u64,
) -> (Vec<Discard>, Vec<Discard>) {
    let (mut dropped_a, mut dropped_b) = (Vec::new(), Vec::new());
    for step in 0..=ms {
        let now = t0 + MS * step as u32;
        let mut to_b: Vec<ControlPacket> = sent(&a.handle(Event::Tick, now));
        let mut to_a: Vec<ControlPacket> = sent(&b.handle(Event::Tick, now));
        while !to_a.is_empty() || !to_b.is_empty() {
            let mut next_b = Vec::new();
            for p in to_a.drain(..) {
                let actions = a.handle(Event::Received(p), now);
                dropped_a.extend(discards(&actions));
                next_b.extend(sent(&actions));
            }
            for p in to_b.drain(..) {
                let actions = b.handle(Event::Received(p), now);
                dropped_b.extend(discards(&actions));
                to_a.extend(sent(&actions));
            }
            to_b = next_b;
        }
    }
    (dropped_a, dropped_b)
}

#[test]
fn authenticated_sessions_come_up_and_a_wrong_key_never_does() {
    let t0 = Instant::now();
    for auth_type in [
        AuthType::KeyedMd5,
        AuthType::MeticulousKeyedMd5,
        AuthType::KeyedSha1,
        AuthType::MeticulousKeyedSha1,
    ] {
        let mut a =
            Session::new(config(50, 50, 3), LOCAL, 1, t0).authenticated(key(auth_type, "k1"), 10);
        let mut b = Session::new(config(50, 50, 3), REMOTE, 2, t0)
            .authenticated(key(auth_type, "k1"), u32::MAX - 3);
        let (da, db) = run_pair(&mut a, &mut b, t0, 3000);
        assert_eq!((a.state(), b.state()), (State::Up, State::Up), "{auth_type}: {da:?} {db:?}");
        assert!(da.is_empty() && db.is_empty(), "{auth_type}: {da:?} {db:?}");
        assert_eq!(a.authentication().map(|k| k.auth_type), Some(auth_type));

        let mut a =
            Session::new(config(50, 50, 3), LOCAL, 1, t0).authenticated(key(auth_type, "k1"), 10);
        let mut b =
            Session::new(config(50, 50, 3), REMOTE, 2, t0).authenticated(key(auth_type, "k2"), 10);
        let (da, _) = run_pair(&mut a, &mut b, t0, 3000);
        assert_eq!((a.state(), b.state()), (State::Down, State::Down), "{auth_type}");
        assert!(da.iter().all(|d| *d == Discard::Authentication(AuthFailure::Digest)), "{da:?}");
        assert!(a.counters().control_discarded >= 2);
    }
}

#[test]
fn an_authenticated_session_takes_only_authenticated_packets() {
    let t0 = Instant::now();
    let shared = key(AuthType::MeticulousKeyedSha1, "k");
    let mut a = Session::new(config(50, 50, 3), LOCAL, 1, t0).authenticated(shared.clone(), 1);
    let mut b = Session::new(config(50, 50, 3), REMOTE, 2, t0).authenticated(shared.clone(), 1);
    run_pair(&mut a, &mut b, t0, 2000);
    assert_eq!(a.state(), State::Up);
    let later = t0 + 2001 * MS;
    // RFC 5880 §6.8.6: the A bit clear while authentication is in use: discarded, even with
    // the right discriminators.
    let plain = peer(State::Down, LOCAL, 1000, 50, 3);
    let r = a.handle(Event::Received(plain), later);
    assert_eq!(
        discards(&r),
        vec![Discard::Authentication(AuthFailure::Missing(AuthType::MeticulousKeyedSha1))]
    );
    // A replay of the peer's last packet: its sequence number is no longer new.
    let last = sent(&b.handle(Event::Tick, b.next_deadline().unwrap()));
    let now = b.next_deadline().unwrap();
    assert!(discards(&a.handle(Event::Received(last[0]), now)).is_empty());
    let r = a.handle(Event::Received(last[0]), now);
    assert!(
        matches!(discards(&r)[..], [Discard::Authentication(AuthFailure::Sequence { .. })]),
        "{r:?}"
    );
    // The peer's authenticated Down is believed when it names the session.
    let mut down = peer(State::Down, LOCAL, 1000, 50, 3);
    let mut peer_auth = AuthState::new(shared, last[0].auth.unwrap().sequence.wrapping_add(1));
    peer_auth.sign(&mut down, now);
    let r = a.handle(Event::Received(down), now);
    assert_eq!(
        changes(&r),
        vec![(State::Up, State::Down, Diagnostic::NeighborSignaledSessionDown, false)]
    );
    // And a session without authentication refuses authenticated packets.
    let mut down = peer(State::Down, 0, 1000, 50, 3);
    peer_auth.sign(&mut down, now);
    let mut plain_session = Session::new(config(50, 50, 3), LOCAL, 1, t0);
    let r = plain_session.handle(Event::Received(down), now);
    assert_eq!(
        discards(&r),
        vec![Discard::Authentication(AuthFailure::Unexpected(AuthType::MeticulousKeyedSha1))]
    );
}

#[test]
fn every_packet_of_an_authenticated_session_is_signed() {
    let t0 = Instant::now();
    let mut s = Session::new(config(50, 50, 3), LOCAL, 1, t0)
        .authenticated(key(AuthType::MeticulousKeyedMd5, "k"), 41);
    let first = sent(&s.handle(Event::Tick, t0));
    let second = sent(&s.handle(Event::Tick, s.next_deadline().unwrap()));
    let seqs: Vec<u32> = first.iter().chain(&second).map(|p| p.auth.unwrap().sequence).collect();
    assert_eq!(seqs, vec![41, 42]);
    assert!(first.iter().chain(&second).all(|p| p.auth.unwrap().key_id == 1));
}

/// RFC 5880 §6.8.6: while Up, only the session's discriminator selects it, authenticated or
/// not. A packet without it is discarded before its digest is checked: a forged flood costs
/// no hashing and moves no sequence number, and even the peer's own signed Down without our
/// discriminator waits for our Detection Time, as for an unauthenticated session.
#[test]
fn an_up_authenticated_session_ignores_packets_without_its_discriminator() {
    let t0 = Instant::now();
    let shared = key(AuthType::MeticulousKeyedSha1, "k");
    let mut a = Session::new(config(50, 50, 3), LOCAL, 1, t0).authenticated(shared.clone(), 1);
    let mut b = Session::new(config(50, 50, 3), REMOTE, 2, t0).authenticated(shared.clone(), 1);
    assert!(a.takes_zero_discriminator(), "Down: a peer's first packets carry zero");
    run_pair(&mut a, &mut b, t0, 2000);
    assert_eq!(a.state(), State::Up);
    assert!(!a.takes_zero_discriminator(), "the receive thread drops them before the queue");
    let now = t0 + 2001 * MS;
    let (deadline, detection) = (a.next_deadline(), a.detection_time());
    let next_seq = sent(&b.handle(Event::Tick, b.next_deadline().unwrap()))[0]
        .auth
        .unwrap()
        .sequence
        .wrapping_add(1);
    // A forger's packet: the A bit, the right type and key ID, a made-up digest.
    let mut forged = peer(State::Down, 0, 1000, 50, 3);
    forged.auth = Some(AuthSection {
        auth_type: AuthType::MeticulousKeyedSha1,
        key_id: 1,
        reserved: 0,
        sequence: next_seq,
        digest: [0x5a; 20],
    });
    // The peer's own, correctly signed, without our discriminator.
    let mut signed_zero = peer(State::Down, 0, 1000, 50, 3);
    AuthState::new(shared.clone(), next_seq).sign(&mut signed_zero, now);
    for (packet, state) in [(forged, State::Down), (signed_zero, State::Down)] {
        let r = a.handle(Event::Received(packet), now);
        assert_eq!(discards(&r), vec![Discard::ZeroDiscriminatorWhileUp(state)]);
        assert!(changes(&r).is_empty() && sent(&r).is_empty(), "{r:?}");
    }
    assert_eq!(
        (a.state(), a.next_deadline(), a.detection_time()),
        (State::Up, deadline, detection)
    );
    assert_eq!(a.counters().control_discarded, 2);
    // Neither was checked, so neither used up its sequence number: the peer's next packet
    // with it (a meticulous type refuses any number seen before) is taken.
    let mut next = peer(State::Up, LOCAL, 50, 50, 3);
    AuthState::new(shared, next_seq).sign(&mut next, now);
    let r = a.handle(Event::Received(next), now);
    assert!(discards(&r).is_empty(), "{r:?}");
    assert_eq!(a.state(), State::Up);
}

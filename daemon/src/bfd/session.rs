//! One BFD session in asynchronous mode (RFC 5880 §6), sans-IO: packets and time go in,
//! packets to send and state changes come out. No sockets, no clock: the caller passes `now`
//! and asks [`Session::next_deadline`] when to call again.

use super::auth::{AuthFailure, AuthState, Authentication};
use super::packet::{ControlPacket, Diagnostic, State};
use std::time::{Duration, Instant};

/// RFC 5880 §6.8.3: "When bfd.SessionState is not Up, the system MUST set
/// bfd.DesiredMinTxInterval to a value of not less than one second (1,000,000 microseconds)."
pub const SLOW_TX: Duration = Duration::from_secs(1);

/// The timers and role a session is configured with (one BFD profile).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionConfig {
    /// bfd.DesiredMinTxInterval once Up.
    pub desired_min_tx: Duration,
    /// bfd.RequiredMinRxInterval.
    pub required_min_rx: Duration,
    /// bfd.DetectMult.
    pub detect_mult: u8,
    /// RFC 5880 §6.1: the passive side waits for the peer's first packet before sending.
    pub passive: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A packet that passed [`ControlPacket::decode`] and was demultiplexed to this session.
    Received(ControlPacket),
    /// Time passed: run the timers that are due.
    Tick,
    /// New timers from a config reload.
    Reconfigure(SessionConfig),
    /// RFC 5880 §6.8.16: administrative control.
    AdminDown,
    AdminUp,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Send(ControlPacket),
    StateChanged {
        from: State,
        to: State,
        diagnostic: Diagnostic,
        /// The change was the peer signalling AdminDown: per RFC 5882 §3.2 its clients
        /// must not be taken down for it.
        remote_admin_down: bool,
    },
    /// A packet for this session was discarded (RFC 5880 §6.7, §6.8.6); nothing changed.
    Discarded(Discard),
}

/// Why a packet that reached the session was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Discard {
    #[error("authentication failed: {0}")]
    Authentication(#[from] AuthFailure),
    /// RFC 5880 §6.8.6: a nonzero Your Discriminator selects the session; this one is not ours.
    #[error("Your Discriminator {0} is not this session's (RFC 5880 §6.8.6)")]
    NotOurDiscriminator(u32),
    /// While Up, only our discriminator selects the session: a packet without it is ignored
    /// (authenticated or not), and a peer that lost it reaches us by the Detection Time.
    #[error("{0} with Your Discriminator 0 while Up: ignored, an Up session is selected only by its discriminator (RFC 5880 §6.8.6 demultiplexing)")]
    ZeroDiscriminatorWhileUp(State),
}

/// Packet counters, as FRR's `show bfd peers counters` has them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    pub control_input: u64,
    pub control_output: u64,
    pub session_up: u64,
    pub session_down: u64,
    /// Packets for this session that were discarded ([`Discard`]).
    pub control_discarded: u64,
}

/// Timer values a Poll Sequence is changing (RFC 5880 §6.8.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct InEffect {
    /// The TX interval base actually used for pacing.
    desired_min_tx: Duration,
    /// The RX interval used to compute the Detection Time.
    required_min_rx: Duration,
}

pub struct Session {
    config: SessionConfig,
    state: State,
    remote_state: State,
    local_discr: u32,
    remote_discr: u32,
    local_diag: Diagnostic,
    remote_diag: Diagnostic,
    /// What we advertise in Desired Min TX (at least 1 s while not Up).
    desired_min_tx: Duration,
    /// What we advertise in Required Min RX.
    required_min_rx: Duration,
    in_effect: InEffect,
    remote_min_rx: Duration,
    remote_desired_min_tx: Duration,
    remote_detect_mult: u8,
    /// A Poll Sequence is in progress: every packet carries P until a Final arrives.
    polling: bool,
    /// A Final must go out before the next periodic packet.
    final_due: bool,
    next_tx: Option<Instant>,
    detect_deadline: Option<Instant>,
    /// The detection time has been measured again once since the last valid packet because
    /// this node, not the peer, stopped running ([`Session::excuse_local_stall`]).
    stall_excused: bool,
    last_change: Instant,
    counters: Counters,
    rng: u64,
    /// RFC 5880 §6.7: the key and sequence numbers when the session is authenticated.
    auth: Option<AuthState>,
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

impl Session {
    /// A new session in state Down. `local_discr` must be nonzero and unique on this system
    /// (RFC 5880 §6.8.1); `seed` makes the jitter differ between sessions.
    pub fn new(config: SessionConfig, local_discr: u32, seed: u64, now: Instant) -> Session {
        let desired_min_tx = config.desired_min_tx.max(SLOW_TX);
        let mut session = Session {
            config,
            state: State::Down,
            remote_state: State::Down,
            local_discr,
            remote_discr: 0,
            local_diag: Diagnostic::None,
            remote_diag: Diagnostic::None,
            desired_min_tx,
            required_min_rx: config.required_min_rx,
            in_effect: InEffect { desired_min_tx, required_min_rx: config.required_min_rx },
            // RFC 5880 §6.8.1: bfd.RemoteMinRxInterval "MUST be initialized to 1".
            remote_min_rx: Duration::from_micros(1),
            remote_desired_min_tx: Duration::ZERO,
            remote_detect_mult: 0,
            polling: false,
            final_due: false,
            next_tx: None,
            detect_deadline: None,
            stall_excused: false,
            last_change: now,
            counters: Counters::default(),
            rng: seed | 1,
            auth: None,
        };
        if !config.passive {
            session.next_tx = Some(now);
        }
        session
    }

    /// Authenticates every packet sent and demands it of every packet received (RFC 5880
    /// §6.7). `initial_sequence` is bfd.XmitAuthSeq's start, which "MUST be initialized to a
    /// random 32-bit value".
    pub fn authenticated(mut self, auth: Authentication, initial_sequence: u32) -> Session {
        self.auth = Some(AuthState::new(auth, initial_sequence));
        self
    }

    /// The authentication in use, if any.
    pub fn authentication(&self) -> Option<&Authentication> {
        self.auth.as_ref().map(AuthState::authentication)
    }

    pub fn state(&self) -> State {
        self.state
    }
    pub fn remote_state(&self) -> State {
        self.remote_state
    }
    pub fn local_discriminator(&self) -> u32 {
        self.local_discr
    }
    pub fn remote_discriminator(&self) -> u32 {
        self.remote_discr
    }
    pub fn local_diagnostic(&self) -> Diagnostic {
        self.local_diag
    }
    pub fn remote_diagnostic(&self) -> Diagnostic {
        self.remote_diag
    }
    pub fn config(&self) -> SessionConfig {
        self.config
    }
    pub fn counters(&self) -> Counters {
        self.counters
    }
    pub fn polling(&self) -> bool {
        self.polling
    }
    /// When the state last changed.
    pub fn last_change(&self) -> Instant {
        self.last_change
    }
    /// The peer's Desired Min TX, Required Min RX and Detect Mult as last received.
    pub fn remote_timers(&self) -> (Duration, Duration, u8) {
        (self.remote_desired_min_tx, self.remote_min_rx, self.remote_detect_mult)
    }

    /// RFC 5880 §6.8.7: the interval between periodic packets before jitter:
    /// max(bfd.DesiredMinTxInterval, bfd.RemoteMinRxInterval). `None` while the peer asks
    /// for no packets (Required Min RX zero).
    pub fn transmit_interval(&self) -> Option<Duration> {
        if self.remote_min_rx.is_zero() {
            return None;
        }
        Some(self.in_effect.desired_min_tx.max(self.remote_min_rx))
    }

    /// RFC 5880 §6.8.4, asynchronous mode: "the Detection Time ... is equal to the value of
    /// Detect Mult received from the remote system, multiplied by the agreed transmit interval
    /// of the remote system (the greater of bfd.RequiredMinRxInterval and the last received
    /// Desired Min TX Interval)."
    pub fn detection_time(&self) -> Option<Duration> {
        if self.remote_detect_mult == 0 {
            return None;
        }
        let agreed = self.in_effect.required_min_rx.max(self.remote_desired_min_tx);
        agreed.checked_mul(u32::from(self.remote_detect_mult))
    }

    /// When [`Event::Tick`] is next due.
    pub fn next_deadline(&self) -> Option<Instant> {
        match (self.next_tx, self.detect_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Called when the BFD thread itself did not run for a while (the node was frozen: a
    /// hypervisor's pause, memory pressure). A detection time that ran out meanwhile measured
    /// this node's stall, not the peer's silence: the peer's packets could not be read, and a
    /// peer frozen alongside (a VM on the same host) could not send. It is measured again from
    /// `now`, once per silence: a valid packet ends the silence, and a peer that is really gone
    /// is declared down one detection time later than it would have been. Returns whether the
    /// deadline moved.
    pub fn excuse_local_stall(&mut self, now: Instant) -> bool {
        let expired = self.detect_deadline.is_some_and(|d| d <= now);
        if !expired || self.stall_excused {
            return false;
        }
        self.restart_detection(now);
        self.stall_excused = true;
        true
    }

    /// The detection time measured again from `now` (none while the peer's Detect Mult is
    /// unknown).
    fn restart_detection(&mut self, now: Instant) {
        self.detect_deadline = self.detection_time().and_then(|d| now.checked_add(d));
    }

    pub fn handle(&mut self, event: Event, now: Instant) -> Vec<Action> {
        let mut actions = Vec::new();
        match event {
            Event::Received(packet) => self.receive(packet, now, &mut actions),
            Event::Tick => self.tick(now, &mut actions),
            Event::Reconfigure(config) => self.reconfigure(config, now, &mut actions),
            Event::AdminDown => {
                if self.state != State::AdminDown {
                    // RFC 5880 §6.8.16: set AdminDown with diagnostic 7; stop detecting.
                    self.local_diag = Diagnostic::AdministrativelyDown;
                    self.set_state(State::AdminDown, false, now, &mut actions);
                    self.detect_deadline = None;
                    self.send_now(now, &mut actions);
                }
            }
            Event::AdminUp => {
                if self.state == State::AdminDown {
                    // "...set bfd.SessionState to Down", then start over as a new session.
                    self.set_state(State::Down, false, now, &mut actions);
                    if !self.config.passive || self.remote_discr != 0 {
                        self.send_now(now, &mut actions);
                    }
                }
            }
        }
        actions
    }

    fn receive(&mut self, p: ControlPacket, now: Instant, actions: &mut Vec<Action>) {
        self.counters.control_input = self.counters.control_input.saturating_add(1);
        if let Err(discard) = self.admit(&p, now) {
            self.counters.control_discarded = self.counters.control_discarded.saturating_add(1);
            actions.push(Action::Discarded(discard));
            return;
        }
        // RFC 5880 §6.8.6, in order.
        self.remote_discr = p.my_discriminator;
        self.remote_state = p.state;
        self.remote_diag = p.diagnostic;
        self.remote_min_rx = Duration::from_micros(u64::from(p.required_min_rx_us));
        self.remote_desired_min_tx = Duration::from_micros(u64::from(p.desired_min_tx_us));
        self.remote_detect_mult = p.detect_mult;
        // "If the Final (F) bit is set and the local system has sent a Poll Sequence, the
        // Poll Sequence MUST be terminated."
        if p.final_bit && self.polling {
            self.polling = false;
            self.in_effect = InEffect {
                desired_min_tx: self.desired_min_tx,
                required_min_rx: self.required_min_rx,
            };
        }
        // "Update the transmit interval ... Update the Detection Time": every valid packet
        // restarts the detection timer.
        // "If bfd.SessionState is AdminDown: Discard the packet." (nothing is detected then)
        if self.state == State::AdminDown {
            return;
        }
        self.restart_detection(now);
        self.stall_excused = false;
        // The periodic packet may now be due sooner (a passive side hearing its peer for the
        // first time, or a peer that lowered its Required Min RX).
        self.reschedule_tx(now);
        // RFC 5880 §6.8.7: "If a BFD Control packet is received with the Poll (P) bit set to
        // 1, the receiving system MUST transmit a BFD Control packet with the Poll (P) bit
        // clear and the Final (F) bit set as soon as practicable, without respect to the
        // transmission timer". Set first, so a packet sent by a state change carries it.
        if p.poll {
            self.final_due = true;
        }
        let before = self.state;
        if p.state == State::AdminDown {
            // "If received state is AdminDown: If bfd.SessionState is not Down, set
            // bfd.LocalDiag to 3 (Neighbor signaled session down) and bfd.SessionState to Down."
            if self.state != State::Down {
                self.local_diag = Diagnostic::NeighborSignaledSessionDown;
                self.set_state(State::Down, true, now, actions);
            }
        } else {
            match (self.state, p.state) {
                // "If bfd.SessionState is Down: If received State is Down, set
                // bfd.SessionState to Init. Else if received State is Init, set Up."
                (State::Down, State::Down) => self.set_state(State::Init, false, now, actions),
                (State::Down, State::Init) => self.set_state(State::Up, false, now, actions),
                // "Else if bfd.SessionState is Init: If received State is Init or Up, set Up."
                (State::Init, State::Init | State::Up) => {
                    self.set_state(State::Up, false, now, actions)
                }
                // "Else (bfd.SessionState is Up): If received State is Down, set bfd.LocalDiag
                // to 3 (Neighbor signaled session down) and bfd.SessionState to Down."
                (State::Up, State::Down) => {
                    self.local_diag = Diagnostic::NeighborSignaledSessionDown;
                    self.set_state(State::Down, false, now, actions)
                }
                _ => {}
            }
        }
        let sent = actions.iter().any(|a| matches!(a, Action::Send(_)));
        if self.final_due || (self.state != before && !sent) {
            self.send_now(now, actions);
        }
    }

    /// The checks of RFC 5880 §6.8.6 that select and authenticate a packet, before anything of
    /// the session changes.
    fn admit(&mut self, p: &ControlPacket, now: Instant) -> Result<(), Discard> {
        // "If the Your Discriminator field is nonzero, it MUST be used to select the session
        // with which this BFD packet is associated."
        if p.your_discriminator != 0 && p.your_discriminator != self.local_discr {
            return Err(Discard::NotOurDiscriminator(p.your_discriminator));
        }
        // Demultiplexing comes before authentication (§6.8.6 orders it so): a packet that
        // selects no session is not hashed.
        if p.your_discriminator == 0 && !self.takes_zero_discriminator() {
            return Err(Discard::ZeroDiscriminatorWhileUp(p.state));
        }
        match (&mut self.auth, p.auth) {
            // "If the A bit is set and no authentication is in use (bfd.AuthType is zero), the
            // packet MUST be discarded."
            (None, Some(section)) => {
                return Err(AuthFailure::Unexpected(section.auth_type).into());
            }
            (None, None) => {}
            // "If the A bit is clear and authentication is in use (bfd.AuthType is nonzero),
            // the packet MUST be discarded. If the A bit is set, the packet MUST be
            // authenticated under the rules of section 6.7".
            (Some(auth), _) => {
                // The sequence window is "3 * Detect Mult"; RFC 5880 does not say whose, so
                // the wider of ours and the peer's (BIRD uses its own).
                let mult = self.config.detect_mult.max(p.detect_mult);
                // Twice the Detection Time this packet sets (RFC 5880 §6.8.1, AuthSeqKnown).
                let agreed = self
                    .in_effect
                    .required_min_rx
                    .max(Duration::from_micros(u64::from(p.desired_min_tx_us)));
                let forget_after = agreed.saturating_mul(2 * u32::from(p.detect_mult));
                auth.check(p, mult, forget_after, now)?;
            }
        }
        Ok(())
    }

    /// Whether a packet with Your Discriminator 0 can mean anything to this session; the
    /// receive thread drops the others before they are queued (a flood of them must not crowd
    /// out the peer's own packets).
    ///
    /// Demultiplexing by address alone (Your Discriminator zero) lets anyone on the path who
    /// can forge the peer's source address speak for it (RFC 5880 §6.8.6). A peer that has our
    /// discriminator sends it; one that lost it (its Detection Time passed) stops sending it,
    /// and our own Detection Time then takes the session down. So an Up session takes no
    /// packet without its discriminator: a stranger cannot tear it down. That holds with
    /// authentication too: the peer's authenticated packets carry the discriminator as well,
    /// and checking a forged digest first would let a flood of them into the queue and make
    /// us hash every one.
    pub fn takes_zero_discriminator(&self) -> bool {
        self.state != State::Up
    }

    fn tick(&mut self, now: Instant, actions: &mut Vec<Action>) {
        if self.detect_deadline.is_some_and(|d| d <= now) {
            self.detect_deadline = None;
            // RFC 5880 §6.8.1: bfd.RemoteDiscr "MUST be set to zero" when a Detection Time
            // passes without a valid packet; the peer is forgotten until it speaks again.
            self.remote_discr = 0;
            self.remote_state = State::Down;
            self.remote_min_rx = Duration::from_micros(1);
            self.remote_detect_mult = 0;
            self.polling = false;
            self.in_effect = InEffect {
                desired_min_tx: self.desired_min_tx,
                required_min_rx: self.required_min_rx,
            };
            // RFC 5880 §6.8.4: in Init or Up, "the session has gone down -- the local system
            // MUST set bfd.SessionState to Down and bfd.LocalDiag to 1".
            if matches!(self.state, State::Init | State::Up) {
                self.local_diag = Diagnostic::ControlDetectionTimeExpired;
                self.set_state(State::Down, false, now, actions);
                // Tell the peer at once, in case only one direction failed.
                self.send_now(now, actions);
            }
            if self.config.passive {
                // RFC 5880 §6.1: a passive system is silent until it hears from the peer.
                self.next_tx = None;
            }
        }
        if self.next_tx.is_some_and(|t| t <= now) {
            self.send_now(now, actions);
        }
    }

    fn reconfigure(&mut self, config: SessionConfig, now: Instant, actions: &mut Vec<Action>) {
        let was_passive = self.config.passive;
        self.config = config;
        if was_passive && !config.passive && self.next_tx.is_none() {
            self.next_tx = Some(now);
        }
        self.change_timers(now, actions);
    }

    /// Applies the configured timers (and the 1 s floor while not Up), starting a Poll
    /// Sequence when the advertised values change on an Up session (RFC 5880 §6.8.3).
    fn change_timers(&mut self, now: Instant, actions: &mut Vec<Action>) {
        let desired = if self.state == State::Up {
            self.config.desired_min_tx
        } else {
            self.config.desired_min_tx.max(SLOW_TX)
        };
        let required = self.config.required_min_rx;
        if desired == self.desired_min_tx && required == self.required_min_rx {
            return;
        }
        let old = self.in_effect;
        self.desired_min_tx = desired;
        self.required_min_rx = required;
        if self.state == State::Up {
            // "If bfd.DesiredMinTxInterval is increased and bfd.SessionState is Up, the actual
            // transmission interval used MUST NOT change until the Poll Sequence ... has
            // terminated." Decreases may take effect at once.
            // "If bfd.RequiredMinRxInterval is reduced and bfd.SessionState is Up, the previous
            // value ... MUST be used when calculating the Detection Time for the remote system
            // until the Poll Sequence has terminated." Increases may take effect at once.
            self.in_effect = InEffect {
                desired_min_tx: desired.min(old.desired_min_tx),
                required_min_rx: required.max(old.required_min_rx),
            };
            self.polling = true;
            self.send_now(now, actions);
        } else {
            self.in_effect = InEffect { desired_min_tx: desired, required_min_rx: required };
            self.reschedule_tx(now);
        }
    }

    fn set_state(
        &mut self,
        to: State,
        remote_admin_down: bool,
        now: Instant,
        actions: &mut Vec<Action>,
    ) {
        let from = self.state;
        if from == to {
            return;
        }
        self.state = to;
        self.last_change = now;
        if to == State::Up {
            self.counters.session_up = self.counters.session_up.saturating_add(1);
            self.local_diag = Diagnostic::None;
        }
        if from == State::Up {
            self.counters.session_down = self.counters.session_down.saturating_add(1);
            // A Poll Sequence does not survive the session.
            self.polling = false;
        }
        actions.push(Action::StateChanged {
            from,
            to,
            diagnostic: self.local_diag,
            remote_admin_down,
        });
        // Entering or leaving Up moves the TX floor between 1 s and the configured value.
        self.change_timers(now, actions);
    }

    /// Moves the next periodic packet earlier when the interval shrank.
    fn reschedule_tx(&mut self, now: Instant) {
        if self.config.passive && self.remote_discr == 0 {
            return;
        }
        let Some(interval) = self.transmit_interval() else {
            self.next_tx = None;
            return;
        };
        let latest = now.checked_add(interval);
        self.next_tx = match (self.next_tx, latest) {
            (Some(t), Some(l)) => Some(t.min(l)),
            (None, l) => l,
            (t, None) => t,
        };
    }

    /// Sends one packet now and schedules the next periodic one.
    fn send_now(&mut self, now: Instant, actions: &mut Vec<Action>) {
        let final_bit = std::mem::take(&mut self.final_due);
        let mut packet = ControlPacket {
            diagnostic: self.local_diag,
            state: self.state,
            // RFC 5880 §6.8.7: "A BFD Control packet MUST NOT have both the Poll (P) and
            // Final (F) bits set."
            poll: self.polling && !final_bit,
            final_bit,
            control_plane_independent: false,
            demand: false,
            detect_mult: self.config.detect_mult,
            my_discriminator: self.local_discr,
            your_discriminator: self.remote_discr,
            desired_min_tx_us: micros(self.desired_min_tx),
            required_min_rx_us: micros(self.required_min_rx),
            // No Echo function: RFC 5880 §6.8.9, zero means echo is not supported.
            required_min_echo_rx_us: 0,
            auth: None,
        };
        if let Some(auth) = self.auth.as_mut() {
            auth.sign(&mut packet, now);
        }
        self.counters.control_output = self.counters.control_output.saturating_add(1);
        actions.push(Action::Send(packet));
        self.next_tx = self.transmit_interval().and_then(|i| now.checked_add(self.jittered(i)));
        if self.config.passive && self.remote_discr == 0 {
            self.next_tx = None;
        }
    }

    /// RFC 5880 §6.8.7: "The periodic transmission of BFD Control packets MUST be jittered
    /// on a per-packet basis by up to 25% ... If bfd.DetectMult is equal to 1, the interval
    /// between transmitted BFD Control packets MUST be no more than 90% of the negotiated
    /// transmission interval, and MUST be no less than 75%". We use 75-90 % always, as BIRD
    /// does: no packet is ever late by design, which keeps short detection times safe.
    fn jittered(&mut self, interval: Duration) -> Duration {
        // xorshift64: plenty for spreading packets, and deterministic for tests.
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        let permille = 750 + (self.rng % 151) as u32; // 750..=900
        interval.checked_mul(permille).map_or(interval, |d| d / 1000)
    }
}

#[cfg(test)]
mod tests;

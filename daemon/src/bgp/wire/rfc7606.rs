//! The outcomes of UPDATE error handling (RFC 7606 §2): session reset, treat-as-withdraw and
//! attribute discard, and the types that carry them to the caller.

/// NOTIFICATION error code "UPDATE Message Error" (RFC 4271 §4.5).
pub const UPDATE_MESSAGE_ERROR: u8 = 3;

/// UPDATE Message Error subcodes (RFC 4271 §6.3, IANA "BGP Error Subcodes").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UpdateErrorSubcode {
    MalformedAttributeList = 1,
    UnrecognizedWellKnownAttribute = 2,
    MissingWellKnownAttribute = 3,
    AttributeFlagsError = 4,
    AttributeLengthError = 5,
    InvalidOriginAttribute = 6,
    InvalidNextHopAttribute = 8,
    OptionalAttributeError = 9,
    InvalidNetworkField = 10,
    MalformedAsPath = 11,
}

impl UpdateErrorSubcode {
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// An UPDATE that RFC 7606 still answers with a session reset: the caller sends a NOTIFICATION
/// with [`UPDATE_MESSAGE_ERROR`], `subcode` and `data`, then closes the session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("UPDATE message error {subcode:?}: {reason}")]
pub struct UpdateError {
    pub subcode: UpdateErrorSubcode,
    /// The NOTIFICATION data field (RFC 4271 §6.3 says what each subcode carries).
    pub data: Vec<u8>,
    pub reason: String,
}

impl UpdateError {
    pub fn new(subcode: UpdateErrorSubcode, data: &[u8], reason: impl Into<String>) -> Self {
        Self { subcode, data: data.to_vec(), reason: reason.into() }
    }
}

/// One attribute that was handled by treat-as-withdraw or attribute discard, so the caller can
/// log a line naming the peer, the attribute and the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttrProblem {
    pub type_code: u8,
    /// The rule applied, with its RFC section, e.g. "RFC 7606 §7.3: NEXT_HOP length is not 4".
    pub rule: &'static str,
    pub detail: String,
}

/// The two outcomes short of a session reset (RFC 7606 §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The routes of the UPDATE are withdrawn as if listed in the withdrawn routes.
    TreatAsWithdraw,
    /// The attribute is dropped and the UPDATE processed without it.
    AttributeDiscard,
}

/// The problems found while decoding one UPDATE. RFC 7606 §3 h: when errors call for different
/// approaches the strongest wins, so one treat-as-withdraw settles the UPDATE; the first one is
/// kept as the reason and later ones are only counted among the discards for the log.
#[derive(Debug, Default)]
pub struct Problems {
    pub treat_as_withdraw: Option<AttrProblem>,
    pub discarded: Vec<AttrProblem>,
}

impl Problems {
    pub fn report(&mut self, outcome: Outcome, type_code: u8, rule: &'static str, detail: String) {
        let problem = AttrProblem { type_code, rule, detail };
        match outcome {
            Outcome::TreatAsWithdraw if self.treat_as_withdraw.is_none() => {
                self.treat_as_withdraw = Some(problem);
            }
            _ => self.discarded.push(problem),
        }
    }

    pub fn withdraw(&mut self, type_code: u8, rule: &'static str, detail: String) {
        self.report(Outcome::TreatAsWithdraw, type_code, rule, detail);
    }

    pub fn discard(&mut self, type_code: u8, rule: &'static str, detail: String) {
        self.report(Outcome::AttributeDiscard, type_code, rule, detail);
    }
}

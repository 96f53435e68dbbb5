//! What translating a document reads from the rest of the config, and the record of it.
//!
//! Every read goes through [`Context`], which notes what was asked and a digest of the answer.
//! A translation kept from an earlier load (`manifest/cache.rs`) still holds when the document
//! is unchanged and asking the same questions of the new config gives the same answers: so a
//! change to one EndpointSlice re-translates its Service alone, not the cluster's thousands.
//! The fields are private so no read can bypass the record.

use std::cell::{Cell, RefCell};
use std::hash::Hash;
use std::sync::Arc;

use super::{EndpointIndex, NamespaceIndex, SecretIndex};
use crate::config::announce::{Endpoints, Labels};
use crate::config::digest::digest;

/// The rest of the config, as a translation may read it.
pub(crate) struct Inputs<'a> {
    /// `[node] name`: which `Node` object is this node.
    pub node_name: Option<&'a str>,
    /// This node's labels, for `nodeSelector`s.
    pub node_labels: &'a Labels,
    /// Every EndpointSlice of the config, for the Services.
    pub endpoints: &'a EndpointIndex,
    /// Every Secret of the config, for `passwordSecret`.
    pub secrets: &'a SecretIndex,
    /// Every Namespace's labels, for the Services in them and the EgressIPs' selectors.
    pub namespaces: &'a NamespaceIndex,
    /// `[kubernetes] load_balancer_class`: the Services uplink answers for.
    pub load_balancer_class: Option<&'a str>,
}

/// One question with an argument a translation asked, kept with its answer's digest. Kept
/// with every translation (a Service's asks one, about its endpoints): a namespace is one copy
/// shared by every question about it (`config/shared.rs`), and a name takes its length, not a
/// `String`'s room to grow. The questions without one are [`CommonReads`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Read {
    /// The ready endpoints of (namespace, Service). The name is the endpoint index's copy
    /// when it has one ([`Context::endpoints`]).
    Endpoints(Arc<str>, Arc<str>),
    NamespaceLabels(Arc<str>),
    /// The key a `passwordSecret` (name, namespace) names, or why there is none.
    Password(Box<str>, Option<Box<str>>),
}

/// Which of the questions without an argument a translation asked, as bits. Their answers are
/// the same for every translation of a load ([`Common`]), so a translation keeps only which it
/// asked, not a digest of each: a kept translation was checked against (or made from) the last
/// load's answers, and it still holds where none of those it asked has changed since. Three
/// questions with their digests were 144 bytes for each of a cluster's Services.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CommonReads(u8);

impl CommonReads {
    const NODE_NAME: u8 = 1;
    const NODE_LABELS: u8 = 1 << 1;
    /// Every Namespace and primary network (a namespace selector reads them all).
    const NAMESPACES: u8 = 1 << 2;
    const LOAD_BALANCER_CLASS: u8 = 1 << 3;
    /// Every question: what a translation kept from no known load must be checked against.
    pub const ALL: CommonReads = CommonReads(0b1111);

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether a question of `self` is among `other`'s.
    pub fn meets(self, other: CommonReads) -> bool {
        self.0 & other.0 != 0
    }
}

impl Read {
    /// The question about the endpoints of (namespace, Service).
    pub fn endpoints(namespace: &str, service: &str) -> Read {
        Read::Endpoints(crate::config::shared::name(namespace), service.into())
    }
}

/// What translating one document read: the questions without an argument, and each other
/// question with its answer's digest. `None` when it read what the record cannot follow (a key
/// file on disk): such a translation is not kept.
pub(crate) type Reads = Option<(CommonReads, Vec<(Read, u64)>)>;

/// [`Inputs`] with the record of the document being translated.
pub(crate) struct Context<'a> {
    inputs: Inputs<'a>,
    /// The answers every Service asks for, digested once per load rather than once per
    /// Service checked.
    common: Common,
    common_reads: Cell<CommonReads>,
    reads: RefCell<Vec<(Read, u64)>>,
    followed: Cell<bool>,
}

/// The digests of the answers to the questions without arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Common {
    node_name: u64,
    node_labels: u64,
    namespaces: u64,
    load_balancer_class: u64,
}

impl Common {
    /// The questions whose answers differ from those of `before`.
    pub fn changed_since(&self, before: &Common) -> CommonReads {
        let bit = |changed: bool, question: u8| if changed { question } else { 0 };
        CommonReads(
            bit(self.node_name != before.node_name, CommonReads::NODE_NAME)
                | bit(self.node_labels != before.node_labels, CommonReads::NODE_LABELS)
                | bit(self.namespaces != before.namespaces, CommonReads::NAMESPACES)
                | bit(
                    self.load_balancer_class != before.load_balancer_class,
                    CommonReads::LOAD_BALANCER_CLASS,
                ),
        )
    }
}

impl<'a> Context<'a> {
    pub fn new(inputs: Inputs<'a>) -> Self {
        let common = Common {
            node_name: digest(&inputs.node_name),
            node_labels: digest(inputs.node_labels),
            namespaces: digest(inputs.namespaces),
            load_balancer_class: digest(&inputs.load_balancer_class),
        };
        Context {
            inputs,
            common,
            common_reads: Cell::default(),
            reads: RefCell::new(Vec::new()),
            followed: Cell::new(true),
        }
    }

    /// The digests of the answers that depend on no index: with the indexes, everything an
    /// answer is made from (see [`Context::answer`]).
    pub fn common(&self) -> Common {
        self.common
    }

    /// What the translation since the last call read.
    pub fn take_reads(&self) -> Reads {
        let mut reads = std::mem::take(&mut *self.reads.borrow_mut());
        // Kept with the translation until the next load: no room to grow.
        reads.shrink_to_fit();
        let common = self.common_reads.take();
        self.followed.replace(true).then_some((common, reads))
    }

    /// Whether `reads` get the same answers from these inputs (the questions with an
    /// argument; the others are compared once per load, [`Common::changed_since`]).
    pub fn same_answers(&self, reads: &[(Read, u64)]) -> bool {
        reads.iter().all(|(read, digest)| self.answer(read) == *digest)
    }

    /// The translation read a file: it cannot be kept.
    pub fn read_a_file(&self) {
        self.followed.set(false);
    }

    fn note(&self, read: Read) {
        let digest = self.answer(&read);
        self.reads.borrow_mut().push((read, digest));
    }

    fn note_common(&self, question: u8) {
        let CommonReads(asked) = self.common_reads.get();
        self.common_reads.set(CommonReads(asked | question));
    }

    pub fn node_name(&self) -> Option<&'a str> {
        self.note_common(CommonReads::NODE_NAME);
        self.inputs.node_name
    }

    pub fn node_labels(&self) -> &'a Labels {
        self.note_common(CommonReads::NODE_LABELS);
        self.inputs.node_labels
    }

    /// The ready endpoints of (namespace, Service), when it has any.
    pub fn endpoints(&self, namespace: &str, service: &str) -> Option<&'a Endpoints> {
        let entry = self.inputs.endpoints.entry(namespace, service);
        let name = entry.map_or_else(|| service.into(), |(name, _)| Arc::clone(name));
        self.note(Read::Endpoints(crate::config::shared::name(namespace), name));
        entry.map(|(_, endpoints)| endpoints)
    }

    pub fn namespace_labels(&self, namespace: &str) -> Option<&'a Labels> {
        self.note(Read::NamespaceLabels(crate::config::shared::name(namespace)));
        self.inputs.namespaces.labels(namespace)
    }

    pub fn namespaces(&self) -> &'a NamespaceIndex {
        self.note_common(CommonReads::NAMESPACES);
        self.inputs.namespaces
    }

    pub fn password(&self, name: &str, namespace: Option<&str>) -> Result<String, String> {
        self.note(Read::Password(name.into(), namespace.map(Box::from)));
        self.inputs.secrets.password(name, namespace)
    }

    pub fn load_balancer_class(&self) -> Option<&'a str> {
        self.note_common(CommonReads::LOAD_BALANCER_CLASS);
        self.inputs.load_balancer_class
    }
}

impl Context<'_> {
    /// The digest of the answer to `read`: the one place both the record and the check ask.
    /// It reads the indexes and [`Common`] alone.
    fn answer(&self, read: &Read) -> u64 {
        let inputs = &self.inputs;
        match read {
            Read::Endpoints(namespace, service) => self.endpoints_answer(namespace, service),
            Read::NamespaceLabels(namespace) => self.namespace_labels_answer(namespace),
            Read::Password(name, namespace) => {
                digest(&inputs.secrets.password(name, namespace.as_deref()))
            }
        }
    }

    /// The digest of the answer to [`Read::Endpoints`] about (`namespace`, `service`), asked
    /// without making the question.
    pub fn endpoints_answer(&self, namespace: &str, service: &str) -> u64 {
        digest(self.inputs.endpoints.endpoints(namespace, service))
    }

    /// The digest of the answer to [`Read::NamespaceLabels`] about `namespace`.
    pub fn namespace_labels_answer(&self, namespace: &str) -> u64 {
        digest(&self.inputs.namespaces.labels(namespace))
    }
}

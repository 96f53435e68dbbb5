//! What translating a document reads from the rest of the config, and the record of it.
//!
//! Every read goes through [`Context`], which notes what was asked and a digest of the answer.
//! A translation kept from an earlier load (`manifest/cache.rs`) still holds when the document
//! is unchanged and asking the same questions of the new config gives the same answers: so a
//! change to one EndpointSlice re-translates its Service alone, not the cluster's thousands.
//! The fields are private so no read can bypass the record.

use std::cell::{Cell, RefCell};
use std::hash::{BuildHasher, Hash};
use std::sync::{Arc, LazyLock};

use super::{EndpointIndex, NamespaceIndex, SecretIndex};
use crate::config::announce::{Endpoints, Labels};

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

/// One question a translation asked. Kept with every translation (a Service's asks three):
/// a namespace is one copy shared by every question about it (`config/shared.rs`), and a
/// name takes its length, not a `String`'s room to grow.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Read {
    NodeName,
    NodeLabels,
    /// The ready endpoints of (namespace, Service).
    Endpoints(Arc<str>, Box<str>),
    NamespaceLabels(Arc<str>),
    /// Every Namespace and primary network (a namespace selector reads them all).
    Namespaces,
    /// The key a `passwordSecret` (name, namespace) names, or why there is none.
    Password(Box<str>, Option<Box<str>>),
    LoadBalancerClass,
}

impl Read {
    /// The question about the endpoints of (namespace, Service).
    pub fn endpoints(namespace: &str, service: &str) -> Read {
        Read::Endpoints(crate::config::shared::name(namespace), service.into())
    }
}

/// What translating one document read: each question and its answer's digest. `None` when it
/// read what the record cannot follow (a key file on disk): such a translation is not kept.
pub(crate) type Reads = Option<Vec<(Read, u64)>>;

/// [`Inputs`] with the record of the document being translated.
pub(crate) struct Context<'a> {
    inputs: Inputs<'a>,
    /// The answers every Service asks for, digested once per load rather than once per
    /// Service checked.
    common: Common,
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

impl<'a> Context<'a> {
    pub fn new(inputs: Inputs<'a>) -> Self {
        let common = Common {
            node_name: digest(&inputs.node_name),
            node_labels: digest(inputs.node_labels),
            namespaces: digest(inputs.namespaces),
            load_balancer_class: digest(&inputs.load_balancer_class),
        };
        Context { inputs, common, reads: RefCell::new(Vec::new()), followed: Cell::new(true) }
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
        self.followed.replace(true).then_some(reads)
    }

    /// Whether `reads` get the same answers from these inputs.
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

    pub fn node_name(&self) -> Option<&'a str> {
        self.note(Read::NodeName);
        self.inputs.node_name
    }

    pub fn node_labels(&self) -> &'a Labels {
        self.note(Read::NodeLabels);
        self.inputs.node_labels
    }

    /// The ready endpoints of (namespace, Service), when it has any.
    pub fn endpoints(&self, namespace: &str, service: &str) -> Option<&'a Endpoints> {
        self.note(Read::endpoints(namespace, service));
        self.inputs.endpoints.shared(namespace, service)
    }

    pub fn namespace_labels(&self, namespace: &str) -> Option<&'a Labels> {
        self.note(Read::NamespaceLabels(crate::config::shared::name(namespace)));
        self.inputs.namespaces.labels(namespace)
    }

    pub fn namespaces(&self) -> &'a NamespaceIndex {
        self.note(Read::Namespaces);
        self.inputs.namespaces
    }

    pub fn password(&self, name: &str, namespace: Option<&str>) -> Result<String, String> {
        self.note(Read::Password(name.into(), namespace.map(Box::from)));
        self.inputs.secrets.password(name, namespace)
    }

    pub fn load_balancer_class(&self) -> Option<&'a str> {
        self.note(Read::LoadBalancerClass);
        self.inputs.load_balancer_class
    }
}

impl Context<'_> {
    /// The digest of the answer to `read`: the one place both the record and the check ask.
    /// It reads the indexes and [`Common`] alone.
    fn answer(&self, read: &Read) -> u64 {
        let inputs = &self.inputs;
        match read {
            Read::NodeName => self.common.node_name,
            Read::NodeLabels => self.common.node_labels,
            Read::Endpoints(namespace, service) => {
                digest(inputs.endpoints.endpoints(namespace, service))
            }
            Read::NamespaceLabels(namespace) => digest(&inputs.namespaces.labels(namespace)),
            Read::Namespaces => self.common.namespaces,
            Read::Password(name, namespace) => {
                digest(&inputs.secrets.password(name, namespace.as_deref()))
            }
            Read::LoadBalancerClass => self.common.load_balancer_class,
        }
    }
}

/// foldhash's quality hasher, seeded at random once per run: the same answer (or text) gives
/// the same digest in every load of a run, and no object can be written to collide with
/// another's digest. Thousands of answers are digested at each reload: SipHash was a tenth of
/// the config load's time at 5,000 Services.
pub(super) fn digest<T: Hash + ?Sized>(value: &T) -> u64 {
    static STATE: LazyLock<foldhash::quality::RandomState> = LazyLock::new(Default::default);
    STATE.hash_one(value)
}

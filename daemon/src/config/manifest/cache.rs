//! What one load of the manifests keeps for the next: each document's facts for the indexes
//! and its translation with what the translation read (`manifest/context.rs`).
//!
//! With `[kubernetes]` every API event is a reload, and a cluster holds thousands of Services
//! and EndpointSlices: parsing and translating all of them for each event took 0.8 s at 10,000
//! Services. With the cache a reload parses only the objects whose text changed and
//! translates only those and the ones whose inputs changed (a Service whose endpoints did).
//! The result is the same as without it: a load with an empty cache (`uplink check`, the
//! tests) takes the same path.
//!
//! Only the facts and the translation are kept, not the parsed YAML: a document to translate
//! is parsed again from its text (at 10,000 Services, holding every parsed object until its
//! translation doubled the first load's peak memory).

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use smallvec::SmallVec;

use super::context::{Common, CommonReads, Context, Read};
use super::{parse, translate, Facts, Indexes, ManifestDocument};
use crate::config::announce::{Placed, Service};
use crate::config::error::ConfigError;
use crate::config::validate::Fragment;
use crate::config::{is_api_source, Source};

/// The manifests of the last load, in its order.
#[derive(Default)]
pub struct ManifestCache {
    /// In the last load's order, which is the next one's too (the files by name, then the
    /// API's objects by path): a load walks them beside its own sources and finds an
    /// unchanged one at the same place, by its path's pointer, rather than hashing 20,000
    /// paths twice (as a map did: a fifth of a load at 10,000 Services). The order is only
    /// relied on to be fast: sources in any other order load the same config.
    entries: Vec<CachedSource>,
    /// The indexes of the sources' facts as the last load made them, kept while no source
    /// with facts (an EndpointSlice, a Secret, a Namespace, a Node) comes, changes or goes:
    /// a new Service does not make them again. An EndpointSlice's change makes only its
    /// Service's entry again.
    indexes: Option<Arc<Indexes>>,
    /// What came, changed or went among the facts since the indexes were made.
    fact_changes: FactChanges,
    /// Counts the indexes made: a load whose indexes have the last one's number has the same,
    /// but for the entries of `entries_remade`.
    indexes_made: u64,
    /// The questions whose answers changed when the kept indexes had entries made again.
    entries_remade: Vec<Read>,
    /// The inputs every kept translation was last checked against or made from: the indexes'
    /// number and the answers that need no index. A load with the same inputs gets the same
    /// answers to every question, so it keeps each translation without asking them again
    /// (10,000 Services ask 40,000 questions).
    checked_against: Option<(u64, Common)>,
    /// Which translations this load asks their questions again.
    recheck: Recheck,
}

/// What came, changed or went among the facts of the sources.
#[derive(Default)]
struct FactChanges {
    /// A fact other than an EndpointSlice's: the indexes are made again.
    other: bool,
    /// The Services (namespace, name) whose EndpointSlices came, changed or went.
    slices_of: HashSet<(String, String), foldhash::fast::RandomState>,
}

impl FactChanges {
    /// Notes the facts of a source that came, changed (its old and its new entry) or went.
    fn note(&mut self, source: &CachedSource) {
        for document in &source.documents {
            match document.facts.as_deref() {
                None | Some(Facts::None) => {}
                Some(Facts::Slice(slice)) => {
                    let (namespace, service) = slice.service();
                    self.slices_of.insert((namespace.to_string(), service.to_string()));
                }
                _ => self.other = true,
            }
        }
    }
}

/// Up to this many endpoint entries made again, a translation's read is compared with each.
const FEW_REMADE: usize = 4;

/// Which kept translations a load asks their questions again.
enum Recheck {
    /// Every one: the inputs are new (or the first load). Those that asked a question without
    /// an argument whose answer `changed` are made again.
    Every { changed: CommonReads },
    /// Those that read one of these (an endpoint index entry made again); the others get the
    /// same answers as in the last load.
    Reading(HashSet<Read, foldhash::fast::RandomState>),
    /// None: the inputs are the last load's.
    None,
}

impl Default for Recheck {
    fn default() -> Self {
        Recheck::Every { changed: CommonReads::ALL }
    }
}

impl Recheck {
    /// Whether a translation that asked `common` and `reads` gets the same answers from
    /// `context`.
    fn same_answers(
        &self,
        common: CommonReads,
        reads: &[(Read, u64)],
        context: &Context<'_>,
    ) -> bool {
        match self {
            Recheck::None => true,
            Recheck::Reading(changed) => {
                // Only an endpoint entry is made again: the other questions need no lookup.
                // Asked of every Service at every endpoint change, where one or two entries
                // were made again: compared with those, which nearly always differ in their
                // first bytes, rather than hashed (2% of the daemon's work over the benchmark's
                // events at 10,000 Services).
                let touched = |read: &Read| {
                    matches!(read, Read::Endpoints(..))
                        && if changed.len() <= FEW_REMADE {
                            changed.iter().any(|remade| remade == read)
                        } else {
                            changed.contains(read)
                        }
                };
                !reads.iter().any(|(read, _)| touched(read)) || context.same_answers(reads)
            }
            Recheck::Every { changed } => !common.meets(*changed) && context.same_answers(reads),
        }
    }
}

struct CachedSource {
    /// The source's path: the load's own (shared) copy, so the same object is known by the
    /// pointer.
    path: Arc<Path>,
    /// The text the entry was made from: the source's own (shared) copy, so an unchanged
    /// object is known by the pointer, and the same text in another copy (a file read again)
    /// by comparing the two. No digest is kept: a changed object's text is compared once,
    /// where its digest was 8 bytes in each of a cluster's tens of thousands of entries.
    text: Arc<str>,
    /// Its YAML errors, reported by every load; `None` when it has none (nearly every
    /// source), one pointer wide (a list's own three words would be in every entry).
    #[allow(clippy::box_collection)]
    parse_errors: Option<Box<Vec<ConfigError>>>,
    /// Inline when there is one, as in every object from the API: a list of its own was an
    /// allocation of 144 bytes for each of a cluster's Services and EndpointSlices.
    documents: SmallVec<[CachedDocument; 1]>,
}

/// Kept for every document of the config, at a cluster's size tens of thousands: what most
/// documents leave empty (facts, errors, a translation to nothing) takes no room beyond a
/// pointer.
struct CachedDocument {
    /// Its place in the file and the line it starts on. 32 bits each, as [`small`] keeps them:
    /// twice as many bytes in each of a cluster's tens of thousands of entries bought nothing.
    index: u32,
    line: u32,
    /// `None` for a document without facts (a Service).
    facts: Option<Box<Facts>>,
    translation: Kept,
}

/// A document's translation as the cache keeps it.
enum Kept {
    /// Not translated yet, or its translation read what the record cannot follow.
    None,
    /// Translated to nothing, with no question asked and no error: every EndpointSlice, which
    /// a boxed [`Translation`] gave 120 bytes each.
    Nothing,
    /// One Service that asked only about itself: every Service object of a cluster.
    Service(Box<KeptService>),
    Translation(Box<Translation>),
    /// The last text's translation, until the changed text is translated: not to be trusted,
    /// but its Services' keys are given to the same Services of the new one.
    Replaced(Box<Kept>),
}

impl Kept {
    fn of(
        (common, reads): (CommonReads, Vec<(Read, u64)>),
        kept: Translated,
        errors: Vec<ConfigError>,
    ) -> Self {
        if common.is_empty()
            && reads.is_empty()
            && errors.is_empty()
            && matches!(kept, Translated::Nothing)
        {
            return Kept::Nothing;
        }
        let kept = match KeptService::of(common, &reads, kept, &errors) {
            Ok(service) => return Kept::Service(Box::new(service)),
            Err(kept) => kept,
        };
        Kept::Translation(Box::new(Translation {
            common,
            reads: reads.into_boxed_slice(),
            kept,
            errors: errors.into_boxed_slice(),
        }))
    }
}

/// The translation of a Service object that asked, besides the questions without an argument,
/// only about its own endpoints and its own namespace's labels, with no error: every Service of
/// a cluster. Its questions are known from the Service itself, so only their answers' digests
/// are kept: the list of questions and the [`Translation`] around it were 200 bytes for each.
struct KeptService {
    common: CommonReads,
    /// Which of the two questions it asked ([`KeptService::ENDPOINTS`],
    /// [`KeptService::NAMESPACE_LABELS`]): as bits, two `Option`s made each record a size
    /// class larger.
    asked: u8,
    /// The digests of the answers about the Service's endpoints and its namespace's labels,
    /// where it asked.
    endpoints: u64,
    namespace_labels: u64,
    service: Placed<Arc<Service>>,
}

impl KeptService {
    /// `kept` as a [`KeptService`] when that is what it is, or `kept` again.
    fn of(
        common: CommonReads,
        reads: &[(Read, u64)],
        kept: Translated,
        errors: &[ConfigError],
    ) -> Result<Self, Translated> {
        let Translated::Services(mut services) = kept else { return Err(kept) };
        if services.len() != 1 || !errors.is_empty() {
            return Err(Translated::Services(services));
        }
        let Some(service) = services.pop() else { return Err(Translated::Services(services)) };
        let mut out = KeptService { common, asked: 0, endpoints: 0, namespace_labels: 0, service };
        for (read, digest) in reads {
            let (namespace, name) = (out.service.item.namespace(), out.service.item.name());
            let (question, slot) = match read {
                Read::Endpoints(n, s) if **n == *namespace && **s == *name => {
                    (Self::ENDPOINTS, &mut out.endpoints)
                }
                Read::NamespaceLabels(n) if **n == *namespace => {
                    (Self::NAMESPACE_LABELS, &mut out.namespace_labels)
                }
                _ => return Err(out.into_translated()),
            };
            if out.asked & question != 0 {
                return Err(out.into_translated());
            }
            out.asked |= question;
            *slot = *digest;
        }
        Ok(out)
    }

    const ENDPOINTS: u8 = 1;
    const NAMESPACE_LABELS: u8 = 1 << 1;

    fn asked(&self, question: u8) -> bool {
        self.asked & question != 0
    }

    fn into_translated(self) -> Translated {
        Translated::Services(smallvec::smallvec![self.service])
    }

    /// Whether its questions get the same answers from `context` (see [`Recheck::same_answers`]).
    fn same_answers(&self, recheck: &Recheck, context: &Context<'_>) -> bool {
        let service = &self.service.item;
        let (namespace, name) = (service.namespace(), service.name());
        let same = || {
            (!self.asked(Self::ENDPOINTS)
                || context.endpoints_answer(namespace, name) == self.endpoints)
                && (!self.asked(Self::NAMESPACE_LABELS)
                    || context.namespace_labels_answer(namespace) == self.namespace_labels)
        };
        match recheck {
            Recheck::None => true,
            // As for a [`Translation`]: only an endpoint entry is made again. Past a few, the
            // answer itself is asked rather than the set: a question made to look it up there
            // would be two names copied per Service.
            Recheck::Reading(changed) => {
                let touched = self.asked(Self::ENDPOINTS)
                    && (changed.len() > FEW_REMADE
                        || changed.iter().any(|remade| {
                            matches!(remade, Read::Endpoints(n, s) if **n == *namespace && **s == *name)
                        }));
                !touched || same()
            }
            Recheck::Every { changed } => !self.common.meets(*changed) && same(),
        }
    }
}

struct Translation {
    /// The questions without an argument it asked (their answers are the load's).
    common: CommonReads,
    /// The other questions, each with its answer's digest.
    reads: Box<[(Read, u64)]>,
    kept: Translated,
    errors: Box<[ConfigError]>,
}

/// What a document translated to.
enum Translated {
    /// Nothing (an EndpointSlice, a Secret: the indexes read them).
    Nothing,
    /// Services and nothing else, from the API (a `Service` object): merged with the other
    /// such documents' as one list rather than as a fragment each,
    /// which copied a kilobyte per Service at every reload. The API's objects merge after
    /// every file, so their Services keep their place among the Services. Inline: an object
    /// is one Service, which a list put in an allocation of its own.
    Services(SmallVec<[Placed<Arc<Service>>; 1]>),
    /// Anything else. Boxed: a fragment is a kilobyte inline.
    Fragment(Box<Fragment>),
}

impl Translated {
    fn of(fragment: Option<Fragment>, from_api: bool) -> Self {
        match fragment {
            None => Translated::Nothing,
            Some(fragment) if from_api => match Box::new(fragment).into_services_only() {
                Ok(services) => Translated::Services(services.into_iter().collect()),
                Err(fragment) => Translated::Fragment(fragment),
            },
            Some(fragment) => Translated::Fragment(Box::new(fragment)),
        }
    }

    /// Gives each of its Services the key of the same Service in `last`, the translation of
    /// the document's last text (`Service::key`): an object changed, its status written back
    /// at a cluster's first load, keeps the one copy of its key that the allocation, the
    /// announcements and the Events hold, where a new copy beside it was one more per
    /// Service.
    fn take_keys_of(&mut self, last: &Kept) {
        let last = match last {
            Kept::Service(kept) => std::slice::from_ref(&kept.service),
            Kept::Translation(kept) => match &kept.kept {
                Translated::Services(services) => services.as_slice(),
                _ => return,
            },
            _ => return,
        };
        let Translated::Services(now) = self else { return };
        for placed in now.iter_mut() {
            let Some(same) = last.iter().find(|l| l.item.key == placed.item.key) else { continue };
            // Just made: its only holder.
            if let Some(service) = Arc::get_mut(&mut placed.item) {
                service.key = same.item.key.clone();
            }
        }
    }

    /// Adds what it holds to the load's fragments, or to its list of the API's Services.
    fn add_to(&self, out: &mut Vec<Fragment>, services: &mut Vec<Placed<Arc<Service>>>) {
        match self {
            Translated::Nothing => {}
            Translated::Services(kept) => services.extend(kept.iter().cloned()),
            Translated::Fragment(fragment) => out.push(fragment.as_ref().clone()),
        }
    }
}

impl ManifestCache {
    /// Brings the cache to `manifests` (path, text; `count` of them), in the load's order:
    /// entries of paths no longer there go, texts new or changed are parsed.
    pub(crate) fn refresh<'a>(
        &mut self,
        count: usize,
        manifests: impl Iterator<Item = &'a Source>,
    ) {
        let changes = &mut self.fact_changes;
        let mut last = std::mem::take(&mut self.entries).into_iter().peekable();
        // At its size: kept until the next load, a list made at the last one's size and grown
        // by one more object doubled its room (a tenth of a kilobyte per Service).
        let mut entries = Vec::with_capacity(count);
        for (path, text) in manifests {
            // The last load's entries in order until this path's: those before it are gone,
            // and one after it means the path is new. Out of order (the path further on, or
            // before), the path is parsed as new and its old entry goes as gone: the same
            // result, found slower.
            let mut kept = None;
            while let Some(next) = last.peek() {
                if Arc::ptr_eq(&next.path, path) || next.path == *path {
                    kept = last.next();
                    break;
                }
                if *next.path > **path {
                    break;
                }
                if let Some(gone) = last.next() {
                    changes.note(&gone);
                }
            }
            let entry = match kept {
                Some(entry) if Arc::ptr_eq(&entry.text, text) => entry,
                Some(mut entry) => {
                    if entry.text == *text {
                        // The same text in another copy (a file read again).
                        entry.text = text.clone();
                        entry.path = path.clone();
                        entry
                    } else {
                        changes.note(&entry);
                        let mut parsed = CachedSource::parse(path, text);
                        changes.note(&parsed);
                        parsed.replaces(entry);
                        parsed
                    }
                }
                None => {
                    let parsed = CachedSource::parse(path, text);
                    changes.note(&parsed);
                    parsed
                }
            };
            entries.push(entry);
        }
        for gone in last {
            changes.note(&gone);
        }
        self.entries = entries;
    }

    /// The indexes of the facts of the load's manifests, in its order: the last load's when no
    /// source with facts came, changed or went since (the order of the sources that have
    /// facts cannot change then: files by name, then the API's objects by path), with the
    /// entries of the Services whose EndpointSlices did made again.
    pub(crate) fn indexes(&mut self) -> Arc<Indexes> {
        let changes = std::mem::take(&mut self.fact_changes);
        if let Some(kept) = self.indexes.as_mut().filter(|_| !changes.other) {
            // Held by no one else between loads: changed in place.
            if let Some(indexes) = Arc::get_mut(kept) {
                if !changes.slices_of.is_empty() {
                    let slices = self.entries.iter().flat_map(|s| &s.documents).filter_map(|d| {
                        match d.facts.as_deref() {
                            Some(Facts::Slice(slice)) => Some(slice),
                            _ => None,
                        }
                    });
                    let remade = indexes.endpoints.remake(&changes.slices_of, slices);
                    self.entries_remade.extend(
                        remade
                            .into_iter()
                            .map(|(namespace, name)| Read::endpoints(&namespace, &name)),
                    );
                }
                return kept.clone();
            }
        }
        let facts: Vec<&Facts> = self
            .entries
            .iter()
            .flat_map(|s| s.documents.iter().filter_map(|d| d.facts.as_deref()))
            .collect();
        let made = Arc::new(Indexes::of(&facts));
        self.indexes = Some(made.clone());
        self.indexes_made = self.indexes_made.wrapping_add(1);
        self.entries_remade.clear();
        made
    }

    /// Starts the walk of the load's sources ([`ManifestCache::fragments`]) with `context`,
    /// made from the indexes [`ManifestCache::indexes`] returned last.
    pub(crate) fn check_against(&mut self, context: &Context<'_>) {
        let inputs = (self.indexes_made, context.common());
        let remade = std::mem::take(&mut self.entries_remade);
        // Every kept translation was checked against the last load's inputs, or made from
        // them: what it asked without an argument holds where that answer has not changed.
        let changed = match &self.checked_against {
            Some((_, before)) => inputs.1.changed_since(before),
            None => CommonReads::ALL,
        };
        self.recheck = match self.checked_against == Some(inputs) {
            false => Recheck::Every { changed },
            true if remade.is_empty() => Recheck::None,
            true => Recheck::Reading(remade.into_iter().collect()),
        };
        self.checked_against = Some(inputs);
    }

    /// The fragments of the load's `index`th manifest, translated again where the document is
    /// new or what its translation read has changed, added to `out`, or the Services alone of
    /// an object from the API to `services` (see [`Translated::Services`]); its errors go to
    /// `errors`.
    /// Every manifest of the load is walked, in its order, after
    /// [`ManifestCache::check_against`].
    pub(crate) fn fragments(
        &mut self,
        index: usize,
        context: &Context<'_>,
        out: &mut Vec<Fragment>,
        services: &mut Vec<Placed<Arc<Service>>>,
        errors: &mut Vec<ConfigError>,
    ) {
        let recheck = &self.recheck;
        let Some(source) = self.entries.get_mut(index) else { return };
        let path = &source.path;
        let from_api = is_api_source(path);
        errors.extend(source.parse_errors.iter().flat_map(|e| e.iter()).cloned());
        let mut parsed_again: Option<Vec<ManifestDocument>> = None;
        for document in source.documents.iter_mut() {
            match &document.translation {
                Kept::Nothing => continue,
                Kept::Service(kept) if kept.same_answers(recheck, context) => {
                    services.push(kept.service.clone());
                    continue;
                }
                Kept::Translation(kept)
                    if recheck.same_answers(kept.common, &kept.reads, context) =>
                {
                    kept.kept.add_to(out, services);
                    errors.extend(kept.errors.iter().cloned());
                    continue;
                }
                Kept::Service(_) | Kept::Translation(_) | Kept::Replaced(_) | Kept::None => {}
            }
            // The parsed text is not kept (at a cluster's size, every object's parsed YAML at
            // once was most of the first load's memory): parsed again, once per source.
            let again =
                parsed_again.get_or_insert_with(|| parse(path, &source.text, &mut Vec::new()));
            let Some(at) = again.iter().position(|d| small(d.index) == document.index) else {
                // Not in its own text again (cannot happen): nothing kept to trust later.
                document.translation = Kept::None;
                continue;
            };
            let value = again.swap_remove(at).value;
            let doc = ManifestDocument {
                path: path.clone(),
                index: document.index as usize,
                line: document.line as usize,
                value,
            };
            let (fragment, doc_errors) = translate(doc, context);
            let mut translated = Translated::of(fragment, from_api);
            if let Kept::Replaced(last) = &document.translation {
                translated.take_keys_of(last);
            }
            translated.add_to(out, services);
            errors.extend(doc_errors.iter().cloned());
            document.translation = match context.take_reads() {
                Some(reads) => Kept::of(reads, translated, doc_errors),
                None => Kept::None,
            };
        }
    }
}

impl CachedSource {
    /// Takes what `last`, the entry of the same path's last text, translated to, for the new
    /// translations to take their Services' keys from (document by document, as they are
    /// placed in the text).
    fn replaces(&mut self, last: CachedSource) {
        for (document, last) in self.documents.iter_mut().zip(last.documents) {
            let services = match &last.translation {
                Kept::Service(_) => true,
                Kept::Translation(translation) => {
                    matches!(translation.kept, Translated::Services(_))
                }
                _ => false,
            };
            if services {
                document.translation = Kept::Replaced(Box::new(last.translation));
            }
        }
    }

    fn parse(path: &Arc<Path>, text: &Arc<str>) -> Self {
        let mut parse_errors = Vec::new();
        let documents = parse(path, text, &mut parse_errors)
            .into_iter()
            .map(|d| CachedDocument {
                index: small(d.index),
                line: small(d.line),
                facts: match Facts::of(&d.value) {
                    Facts::None => None,
                    facts => Some(Box::new(facts)),
                },
                translation: Kept::None,
            })
            .collect();
        CachedSource {
            path: path.clone(),
            text: text.clone(),
            parse_errors: (!parse_errors.is_empty()).then(|| Box::new(parse_errors)),
            documents,
        }
    }
}

/// A document's place or line as the cache keeps it, `u32::MAX` past that: a file of four
/// billion documents or lines, which no load can hold in memory.
fn small(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use super::ManifestCache;
    use crate::config::Source;
    use crate::config::{load_sources, load_sources_kept};

    const MAIN: &str = "[node]\nname = \"wk1\"\n[[bgp.routers]]\nasn = 65801\n";
    const POOL: &str = "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: vips, namespace: metallb-system}\nspec:\n  addresses: [10.200.0.0/24]\n  serviceAllocation:\n    namespaceSelectors: [{matchLabels: {team: shop}}]\n";
    const PEER: &str = "apiVersion: metallb.io/v1beta2\nkind: BGPPeer\nmetadata: {name: tor, namespace: metallb-system}\nspec:\n  myASN: 65801\n  peerASN: 65102\n  peerAddress: 10.0.0.1\n  passwordSecret: {name: tor-key}\n  nodeSelectors: [{matchLabels: {rack: r1}}]\n";

    fn service(name: &str) -> String {
        format!("apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: shop}}\nspec:\n  type: LoadBalancer\n  externalTrafficPolicy: Local\n")
    }

    fn slice(service: &str, node: &str, ready: bool) -> String {
        slice_with(service, node, ready, "10.128.0.9")
    }

    fn slice_with(service: &str, node: &str, ready: bool, address: &str) -> String {
        format!("apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {service}-1\n  namespace: shop\n  labels: {{kubernetes.io/service-name: {service}}}\naddressType: IPv4\nendpoints:\n- addresses: [{address}]\n  conditions: {{ready: {ready}}}\n  nodeName: {node}\n")
    }

    fn secret(key: &str) -> String {
        format!("apiVersion: v1\nkind: Secret\nmetadata: {{name: tor-key, namespace: metallb-system}}\ntype: kubernetes.io/basic-auth\nstringData: {{password: {key}}}\n")
    }

    fn namespace(team: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: shop, labels: {{team: {team}}}}}\n"
        )
    }

    fn classed_service() -> String {
        format!("{}  loadBalancerClass: uplink\n", service("classed"))
    }

    fn node(rack: &str) -> String {
        format!("apiVersion: v1\nkind: Node\nmetadata: {{name: wk1, labels: {{rack: {rack}}}}}\n")
    }

    /// Each set of objects loads to the same config (or the same errors) through a kept cache
    /// as from scratch, whatever changed since the last: every input a translation reads.
    #[test]
    fn a_kept_cache_loads_what_a_fresh_load_does() {
        let base = || -> Vec<(String, String)> {
            vec![
                ("pool".into(), POOL.into()),
                ("peer".into(), PEER.into()),
                ("secret".into(), secret("s3cret")),
                ("namespace".into(), namespace("shop")),
                ("node".into(), node("r1")),
                ("web".into(), service("web")),
                ("web-slice".into(), slice("web", "wk1", true)),
                ("db".into(), service("db")),
                ("db-slice".into(), slice("db", "wk2", true)),
            ]
        };
        let with = |changes: &[(&str, Option<String>)]| {
            let mut set = base();
            for (name, text) in changes {
                set.retain(|(n, _)| n != name);
                if let Some(text) = text {
                    set.push((name.to_string(), text.clone()));
                }
            }
            set
        };
        let object_steps: Vec<(&str, Vec<(String, String)>)> = vec![
            ("first load", base()),
            ("unchanged", base()),
            (
                "an endpoint moves to this node",
                with(&[("db-slice", Some(slice("db", "wk1", true)))]),
            ),
            (
                "an endpoint turns not ready",
                with(&[("web-slice", Some(slice("web", "wk1", false)))]),
            ),
            (
                "a second slice of a Service",
                with(&[("web-slice-2", Some(slice_with("web", "wk2", true, "10.128.0.7")))]),
            ),
            (
                "its endpoint moves here, the first slice's goes",
                with(&[
                    ("web-slice", Some(slice("web", "wk2", false))),
                    ("web-slice-2", Some(slice_with("web", "wk1", true, "10.128.0.7"))),
                ]),
            ),
            (
                "both slices list the same endpoint",
                with(&[
                    ("web-slice", Some(slice_with("web", "wk1", true, "10.128.0.7"))),
                    ("web-slice-2", Some(slice_with("web", "wk1", true, "10.128.0.7"))),
                ]),
            ),
            (
                "one of them goes: the same endpoints",
                with(&[("web-slice", Some(slice_with("web", "wk1", true, "10.128.0.7")))]),
            ),
            ("a slice is deleted", with(&[("web-slice", None)])),
            ("a Service is deleted", with(&[("db", None), ("db-slice", None)])),
            ("a slice before its Service", with(&[("api-slice", Some(slice("api", "wk1", true)))])),
            (
                // No facts changed: the indexes are the last load's.
                "its Service comes",
                with(&[
                    ("api-slice", Some(slice("api", "wk1", true))),
                    ("api", Some(service("api"))),
                ]),
            ),
            (
                "the namespace leaves the pool's selector",
                with(&[("namespace", Some(namespace("other")))]),
            ),
            ("the Secret's key changes", with(&[("secret", Some(secret("other")))])),
            ("the Secret is deleted", with(&[("secret", None)])),
            ("the node leaves the peer's rack", with(&[("node", Some(node("r2")))])),
            ("a document is broken", with(&[("web", Some("kind: Service\nmetadata: [".into()))])),
            ("back to the start", base()),
        ];
        // Each step: its name, the main file, the objects. The steps above keep the main file.
        type Objects = Vec<(String, String)>;
        let mut steps: Vec<(&str, String, Objects)> =
            object_steps.into_iter().map(|(step, set)| (step, MAIN.to_string(), set)).collect();
        // The questions without an argument, from the main file: a kept translation that
        // asked one is made again when its answer changes, and only then.
        let classed_main = format!(
            "{MAIN}[kubernetes]\nkubeconfig = \"/etc/kubeconfig\"\nload_balancer_class = \"uplink\"\n"
        );
        let classed = || with(&[("classed", Some(classed_service()))]);
        steps.extend([
            ("the node is another", MAIN.replace("wk1", "wk2"), base()),
            ("the node is this one again", MAIN.to_string(), base()),
            ("a load balancer class", classed_main, classed()),
            ("no class again", MAIN.to_string(), classed()),
        ]);
        let mut cache = ManifestCache::default();
        for (step, main, set) in steps {
            let mut sources = vec![(PathBuf::from("uplink.toml"), main)];
            sources
                .extend(set.into_iter().map(|(name, text)| {
                    (PathBuf::from(format!("kubernetes:Object/{name}")), text)
                }));
            let fresh = load_sources(&sources);
            let shared: Vec<Source> = sources
                .iter()
                .map(|(path, text)| (Arc::from(path.as_path()), Arc::from(text.as_str())))
                .collect();
            let refs: Vec<&Source> = shared.iter().collect();
            let kept = load_sources_kept(&refs, &mut cache);
            match (fresh, kept) {
                (Ok(fresh), Ok(kept)) => assert_eq!(fresh, kept, "{step}"),
                (Err(fresh), Err(kept)) => {
                    assert_eq!(fresh.to_string(), kept.to_string(), "{step}")
                }
                (fresh, kept) => panic!("{step}: fresh {fresh:?}, kept {kept:?}"),
            }
        }
    }

    /// A load in the last one's order finds each unchanged object where it was, and keeps its
    /// translation (the same `Arc` of its Service), around a Service that comes and one that
    /// goes; in another order it loads the same config.
    #[test]
    fn unchanged_objects_are_found_in_order_around_the_ones_that_come_and_go() {
        let source = |name: &str| -> Source {
            (
                Arc::from(PathBuf::from(format!("kubernetes:Service/shop/{name}")).as_path()),
                Arc::from(service(name).as_str()),
            )
        };
        let main: Source = (Arc::from(PathBuf::from("uplink.toml").as_path()), Arc::from(MAIN));
        let (a, c, d, e) = (source("a"), source("c"), source("d"), source("e"));
        let load = |cache: &mut ManifestCache, set: &[&Source]| {
            let mut refs = vec![&main];
            refs.extend_from_slice(set);
            load_sources_kept(&refs, cache).unwrap_or_else(|e| panic!("{e}"))
        };
        let by_name = |config: &crate::config::Config, name: &str| {
            let found = config.announce.services.iter().find(|s| s.name() == name);
            found.cloned().unwrap_or_else(|| panic!("{name} in the config"))
        };
        let mut cache = ManifestCache::default();
        let first = load(&mut cache, &[&a, &c, &d]);
        // b comes before c, d goes, e comes last.
        let b = source("b");
        let second = load(&mut cache, &[&a, &b, &c, &e]);
        for name in ["a", "c"] {
            assert!(Arc::ptr_eq(&by_name(&first, name), &by_name(&second, name)), "{name} kept");
        }
        let names: Vec<&str> = second.announce.services.iter().map(|s| s.name()).collect();
        assert_eq!(names, ["a", "b", "c", "e"]);
        // Out of order: the same config as a fresh load, and the next load in order finds it.
        let shuffled = load(&mut cache, &[&e, &c, &a, &b]);
        let fresh = load(&mut ManifestCache::default(), &[&e, &c, &a, &b]);
        assert_eq!(shuffled, fresh);
        let third = load(&mut cache, &[&e, &c, &a, &b]);
        for name in ["a", "b", "c", "e"] {
            assert!(Arc::ptr_eq(&by_name(&shuffled, name), &by_name(&third, name)), "{name}");
        }
    }

    /// A Service whose object changed (its status written back) is a new Service with the
    /// last one's key, the same copy: what keys it holds no second one.
    #[test]
    fn a_changed_service_keeps_its_key() {
        let main: Source = (Arc::from(PathBuf::from("uplink.toml").as_path()), Arc::from(MAIN));
        let path: Arc<Path> = Arc::from(PathBuf::from("kubernetes:Service/shop/web").as_path());
        let with_status = format!(
            "{}status:\n  loadBalancer:\n    ingress: [{{ip: 10.200.0.7}}]\n",
            service("web")
        );
        let mut cache = ManifestCache::default();
        let mut load = |text: &str| {
            let object: Source = (path.clone(), Arc::from(text));
            let config = load_sources_kept(&[&main, &object], &mut cache);
            let config = config.unwrap_or_else(|e| panic!("{e}"));
            config.announce.services.first().cloned().expect("the Service")
        };
        let first = load(&service("web"));
        let written_back = load(&with_status);
        assert!(!Arc::ptr_eq(&first, &written_back), "translated again");
        assert_eq!(written_back.held_ips.as_slice(), ["10.200.0.7".parse::<IpAddr>().unwrap()]);
        assert!(Arc::ptr_eq(&first.key, &written_back.key));
        // Another object's Service in its place does not take it.
        let other = load(&service("api"));
        assert_eq!(&*other.key, "shop/api");
    }

    /// A Service object's translation is kept in its small form (its questions known from the
    /// Service itself) when it asked about its endpoints and its namespace, and a later load
    /// still follows those answers: the endpoints that change make it again.
    #[test]
    fn a_service_is_kept_in_its_small_form_and_follows_its_endpoints() {
        let main: Source = (Arc::from(PathBuf::from("uplink.toml").as_path()), Arc::from(MAIN));
        let object = |path: &str, text: String| -> Source {
            (Arc::from(PathBuf::from(path).as_path()), Arc::from(text.as_str()))
        };
        let web = object("kubernetes:Service/shop/web", service("web"));
        let ns = object("kubernetes:Namespace/shop", namespace("shop"));
        let mut cache = ManifestCache::default();
        let load = |cache: &mut ManifestCache, slice_text: String| {
            let slice = object("kubernetes:EndpointSlice/shop/web-1", slice_text);
            let config = load_sources_kept(&[&main, &ns, &web, &slice], cache);
            config.unwrap_or_else(|e| panic!("{e}")).announce.services[0].clone()
        };
        let first = load(&mut cache, slice("web", "wk1", true));
        let small = |cache: &ManifestCache| {
            cache.entries.iter().flat_map(|e| &e.documents).any(|d| {
                matches!(&d.translation, super::Kept::Service(kept)
                    if kept.asked == super::KeptService::ENDPOINTS | super::KeptService::NAMESPACE_LABELS)
            })
        };
        assert!(small(&cache), "kept as a KeptService");
        assert_eq!(first.endpoints.len(), 1);
        let same = load(&mut cache, slice("web", "wk1", true));
        assert!(Arc::ptr_eq(&first, &same), "kept when nothing it read changed");
        let moved = load(&mut cache, slice("web", "wk2", true));
        assert_eq!(&*moved.endpoints[0].node, "wk2", "made again when its endpoints changed");
        assert!(small(&cache));
    }

    /// The API's Service objects merge as one list after the files: in the files' order, a
    /// Service a conf.d file defines differently is reported at the API's object, and the
    /// config's `files` are the files alone.
    #[test]
    fn the_apis_services_merge_after_the_files_and_are_not_files() {
        let pool = "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: vips, namespace: metallb-system}\nspec:\n  addresses: [10.200.0.0/24]\n";
        let in_file = service("web");
        let from_api = service("web").replace("Local", "Cluster");
        let sources = [
            (PathBuf::from("uplink.toml"), MAIN.to_string()),
            (PathBuf::from("conf.d/web.yaml"), format!("{pool}---\n{in_file}")),
            (PathBuf::from("kubernetes:Service/shop/db"), service("db")),
            (PathBuf::from("kubernetes:Service/shop/web"), from_api),
        ];
        let error = load_sources(&sources).expect_err("two definitions of shop/web").to_string();
        assert!(error.starts_with("kubernetes:Service/shop/web:"), "{error}");
        assert!(error.contains("also defined at conf.d/web.yaml"), "{error}");

        let agreeing = [sources[0].clone(), sources[1].clone(), sources[2].clone()];
        let config = load_sources(&agreeing).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(config.files, vec![PathBuf::from("uplink.toml"), "conf.d/web.yaml".into()]);
        let keys: Vec<String> =
            config.announce.services.iter().map(|s| s.key.to_string()).collect();
        assert_eq!(keys, ["shop/web", "shop/db"]);
        assert_eq!(
            config.announce.services[1].sources.as_slice(),
            [Arc::from(std::path::Path::new("kubernetes:Service/shop/db"))]
        );

        // No Service in the files: the API's are the config's, in the API's order.
        let api_only = [
            (PathBuf::from("uplink.toml"), MAIN.to_string()),
            (PathBuf::from("conf.d/pool.yaml"), pool.to_string()),
            (PathBuf::from("kubernetes:Service/shop/db"), service("db")),
            (PathBuf::from("kubernetes:Service/shop/web"), service("web")),
        ];
        let config = load_sources(&api_only).unwrap_or_else(|e| panic!("{e}"));
        let keys: Vec<String> =
            config.announce.services.iter().map(|s| s.key.to_string()).collect();
        assert_eq!(keys, ["shop/db", "shop/web"]);
    }
}

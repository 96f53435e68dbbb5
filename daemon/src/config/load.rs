//! Finding and reading the config files, then parsing, validating and merging them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::error::{ConfigError, ConfigErrors, Loc};
use super::manifest::{self, ManifestCache};
use super::merge::merge;
use super::model::Config;
use super::raw::RawFile;
use super::source::SourceText;
use super::validate::{validate_file, Fragment, TimerDefaults};
use crate::config::announce::Labels;

/// The node's labels as the TOML fragments give them (plus `kubernetes.io/hostname`), for
/// manifests' `nodeSelector`s. Conflicts are reported later, by the merge.
fn node_labels<'a>(fragments: impl Iterator<Item = &'a Fragment>) -> Labels {
    let mut node = crate::config::announce::Node::default();
    for fragment in fragments {
        if node.name.is_none() {
            node.name = fragment.announce.node_name.as_ref().map(|n| n.item.clone());
        }
        for label in &fragment.announce.node_labels {
            node.labels.entry(label.item.0.clone()).or_insert_with(|| label.item.1.clone());
        }
    }
    node.effective_labels()
}

/// Where the main config file lives unless `--config` says otherwise.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/uplink/uplink.toml";

/// The fragment directory's name, next to the main file.
pub const FRAGMENT_DIR: &str = "conf.d";

/// The files that make up the config: `main_path`, then every `*.toml` and Kubernetes manifest
/// (`*.yaml`, `*.yml`, see `manifest`) in the `conf.d/`
/// directory next to it, sorted by file name (byte order, like `ls` in the C locale). Hidden
/// files (leading `.`, e.g. editor swap files) are skipped. A missing `conf.d/` is fine.
pub fn config_files(main_path: &Path) -> Result<Vec<PathBuf>, ConfigErrors> {
    let mut files = vec![main_path.to_path_buf()];
    let dir = main_path.parent().unwrap_or(Path::new(".")).join(FRAGMENT_DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(files),
        Err(error) => {
            return Err(ConfigErrors(vec![
                Loc::file(&dir).error("", format!("cannot list fragments: {error}"))
            ]))
        }
    };
    let mut fragments = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|error| {
            ConfigErrors(vec![Loc::file(&dir).error("", format!("cannot list fragments: {error}"))])
        })?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !is_fragment_name(name) {
            continue;
        }
        // Follows symlinks, so a fragment may link to a file managed elsewhere.
        if entry.path().is_file() {
            fragments.push(entry.path());
        }
    }
    fragments.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    files.extend(fragments);
    Ok(files)
}

/// Whether a file named `name` in `conf.d/` is part of the config: `*.toml`, `*.yaml`, `*.yml`,
/// not hidden.
pub fn is_fragment_name(name: &str) -> bool {
    !name.starts_with('.') && (name.ends_with(".toml") || is_manifest(Path::new(name)))
}

/// Loads `main_path` and its `conf.d/` fragments into one validated config.
///
/// Every problem in every file is reported, not just the first: syntax errors stop only the
/// file they are in (TOML parsing cannot continue past one), validation errors are collected
/// per value, and merge conflicts are checked across the files that parsed.
pub fn load(main_path: &Path) -> Result<Config, ConfigErrors> {
    load_with(main_path, &[], &mut ManifestCache::default())
}

/// How an object read from the Kubernetes API is named where a file's path would be (errors,
/// `sources`): `kubernetes:Kind/namespace/name`. Its text is the object as YAML.
pub const API_SOURCE_PREFIX: &str = "kubernetes:";

/// One source of the config: its name (a file's path, or `kubernetes:Kind/namespace/name`)
/// and its text. The text is shared: at a cluster's size the objects' texts are megabytes, and
/// the API source's set, the set it publishes, the manifest cache and the snapshot all hold the
/// same copy (the cache knows an unchanged object by it, without reading the text). The name
/// is shared too: the source's set is made again at each event, a copy of every name.
pub type Source = (Arc<Path>, Arc<str>);

/// Objects read from the Kubernetes API as config sources: (`kubernetes:Kind/namespace/name`,
/// the object as YAML), sorted by name. Held as lists taken one after the other, each kind's
/// as the watch holds it: a set made at every event shares them rather than copying every
/// object's place (32 bytes each, and a second table of every object beside the watch's).
#[derive(Debug, Clone, Default)]
pub struct ApiObjects {
    lists: Vec<Arc<Vec<Source>>>,
}

impl ApiObjects {
    /// The set of `objects`, sorted by name.
    pub fn new(objects: Vec<Source>) -> Self {
        Self::from_lists(vec![Arc::new(objects)])
    }

    /// The set of `lists` taken in this order: each sorted by name, and every name of one before
    /// every name of the next.
    pub fn from_lists(lists: Vec<Arc<Vec<Source>>>) -> Self {
        ApiObjects { lists }
    }

    /// The lists, in their order.
    pub fn lists(&self) -> &[Arc<Vec<Source>>] {
        &self.lists
    }

    pub fn iter(&self) -> impl Iterator<Item = &Source> {
        self.lists.iter().flat_map(|list| list.iter())
    }

    pub fn len(&self) -> usize {
        self.lists.iter().map(|list| list.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.lists.iter().all(|list| list.is_empty())
    }
}

impl PartialEq for ApiObjects {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl Eq for ApiObjects {}

/// Kept in the state directory as `{"objects": [[name, text], ...]}`, one list.
impl serde::Serialize for ApiObjects {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        struct Every<'a>(&'a ApiObjects);
        impl serde::Serialize for Every<'_> {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_seq(self.0.iter())
            }
        }
        let mut out = serializer.serialize_struct("ApiObjects", 1)?;
        out.serialize_field("objects", &Every(self))?;
        out.end()
    }
}

impl<'de> serde::Deserialize<'de> for ApiObjects {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        struct Kept {
            objects: Vec<Source>,
        }
        Kept::deserialize(deserializer).map(|kept| ApiObjects::new(kept.objects))
    }
}

/// [`load_with`], where an object from the API that the config refuses is left out (and
/// returned with its errors) instead of refusing everything: the files' rule, a mistake refuses
/// the change, would let one bad Service hold back every other change in the cluster. A mistake
/// in a file still refuses the whole.
pub fn load_with_api(
    main_path: &Path,
    api: &ApiObjects,
    cache: &mut ManifestCache,
) -> (Result<Config, ConfigErrors>, Vec<ConfigError>) {
    let mut objects: Vec<&Source> = api.iter().collect();
    let mut refused = Vec::new();
    // Leaving an object out can leave another without what it names (a pool, a peer): that one
    // goes the next round.
    for _ in 0..4 {
        match load_with(main_path, &objects, cache) {
            Ok(config) => return (Ok(config), refused),
            Err(errors) => {
                let (in_objects, in_files): (Vec<ConfigError>, Vec<ConfigError>) =
                    errors.0.into_iter().partition(|e| is_api_source(&e.file));
                if in_objects.is_empty() || !in_files.is_empty() {
                    let mut all = in_files;
                    all.extend(in_objects);
                    return (Err(ConfigErrors(all)), refused);
                }
                objects.retain(|(path, _)| !in_objects.iter().any(|e| e.file.as_path() == &**path));
                refused.extend(in_objects);
            }
        }
    }
    (load_with(main_path, &objects, cache), refused)
}

/// Whether `path` names an object from the Kubernetes API rather than a file.
pub fn is_api_source(path: &Path) -> bool {
    // By bytes: asked of every Service at every change (its status, its Events).
    path.as_os_str().as_encoded_bytes().starts_with(API_SOURCE_PREFIX.as_bytes())
}

/// [`load`], with objects read from the Kubernetes API (named by [`API_SOURCE_PREFIX`]) after
/// the files: they go through the same parser and merge as manifests in `conf.d/`.
pub fn load_with(
    main_path: &Path,
    api: &[&Source],
    cache: &mut ManifestCache,
) -> Result<Config, ConfigErrors> {
    let files = config_files(main_path)?;
    let mut errors = Vec::new();
    let mut sources = Vec::with_capacity(files.len());
    for file in files {
        match std::fs::read_to_string(&file) {
            Ok(text) => sources.push((Arc::from(file), Arc::from(text))),
            Err(error) => {
                errors.push(Loc::file(&file).error("", format!("cannot read config file: {error}")))
            }
        }
    }
    let sources: Vec<&Source> = sources.iter().chain(api.iter().copied()).collect();
    let result = load_sources_kept(&sources, cache);
    match result {
        Ok(config) if errors.is_empty() => Ok(config),
        Ok(_) => Err(ConfigErrors(errors)),
        Err(ConfigErrors(more)) => {
            errors.extend(more);
            Err(ConfigErrors(errors))
        }
    }
}

/// Loads one file's text; `name` is used in error messages and to resolve `password_file`.
pub fn load_str(name: &str, text: &str) -> Result<Config, ConfigErrors> {
    load_sources(&[(PathBuf::from(name), text.to_string())])
}

/// Kubernetes manifests (`*.yaml`, `*.yml`, objects from the API) rather than TOML.
fn is_manifest(path: &Path) -> bool {
    is_api_source(path) || path.extension().is_some_and(|e| e == "yaml" || e == "yml")
}

/// Loads several files' texts, merged in the given order: what [`load`] does with the files it
/// read, so callers that hold the texts (the fuzz target of the multi-file merge) take the same
/// path. `*.yaml`/`*.yml` paths are manifests, everything else TOML.
///
/// TOML files are read first, because a manifest's `nodeSelector` is matched against the node
/// labels that TOML `[node]` sections give; the fragments still merge in file order.
pub fn load_sources(sources: &[(PathBuf, String)]) -> Result<Config, ConfigErrors> {
    let sources: Vec<Source> = sources
        .iter()
        .map(|(path, text)| (Arc::from(path.as_path()), Arc::from(text.as_str())))
        .collect();
    let sources: Vec<&Source> = sources.iter().collect();
    load_sources_kept(&sources, &mut ManifestCache::default())
}

/// [`load_sources`], keeping in `cache` what the next load can use again (see
/// `manifest/cache.rs`): the same config, sooner when few sources changed.
pub fn load_sources_kept(
    sources: &[&Source],
    cache: &mut ManifestCache,
) -> Result<Config, ConfigErrors> {
    let mut errors: Vec<ConfigError> = Vec::new();
    // Asked once per source: the sources are walked three times, and at a cluster's size
    // each walk is tens of thousands of paths.
    let manifest: Vec<bool> = sources.iter().map(|(path, _)| is_manifest(path)).collect();
    // The TOML files' fragments, in their order (a slot for each source was 24 bytes for each
    // of a cluster's objects at every reload).
    let mut slots: Vec<Vec<Fragment>> = Vec::new();
    for ((path, text), manifest) in sources.iter().copied().zip(&manifest) {
        let text: &str = text;
        if *manifest {
            continue;
        }
        let source = SourceText::new(path, text);
        match toml::from_str::<RawFile>(text) {
            Ok(raw) => {
                slots.push(vec![validate_file(&source, raw, TimerDefaults::Node, &mut errors)])
            }
            Err(error) => {
                errors.push(source.toml_error(&error));
                slots.push(Vec::new());
            }
        }
    }
    let node_name = slots.iter().flatten().find_map(|f| f.announce.node_name.as_ref());
    let node_name = node_name.map(|name| name.item.clone());
    let load_balancer_class = slots
        .iter()
        .flatten()
        .find_map(|f| f.kubernetes.as_ref())
        .and_then(|(kubernetes, _)| kubernetes.load_balancer_class.clone());
    let mut node_labels = node_labels(slots.iter().flatten());
    // Manifests are read first, all of them, because a Service takes its endpoints from the
    // EndpointSlices of any manifest, and a passwordSecret its key from any Secret.
    let manifests = sources.iter().copied().zip(&manifest).filter(|(_, m)| **m);
    let count = manifest.iter().filter(|m| **m).count();
    cache.refresh(count, manifests.map(|(source, _)| source));
    let indexes = cache.indexes();
    if let Some(name) = &node_name {
        // This node's `Node` object adds its labels (the TOML ones win a disagreement, which
        // the merge then reports).
        for (key, value) in indexes.node_labels(name) {
            node_labels.entry(key).or_insert(value);
        }
    }
    let network_unavailable =
        node_name.as_ref().is_some_and(|name| indexes.node_network_unavailable(name));
    let context = manifest::Context::new(manifest::Inputs {
        node_name: node_name.as_deref(),
        node_labels: &node_labels,
        endpoints: &indexes.endpoints,
        secrets: &indexes.secrets,
        namespaces: &indexes.namespaces,
        load_balancer_class: load_balancer_class.as_deref(),
    });
    cache.check_against(&context);
    // Room for the files' fragments and the API's Services' one: a fragment is a kilobyte
    // inline, and the room of one per source was 24 MB made and freed at every reload at
    // 10,000 Services, the reload's peak. The few other objects that make a fragment (pools,
    // peers, policies) grow it.
    let mut fragments: Vec<Fragment> = Vec::with_capacity(slots.len() + 1);
    let mut api_services = Vec::new();
    let mut manifest_index = 0;
    let mut slots = slots.into_iter();
    for manifest in &manifest {
        if *manifest {
            cache.fragments(
                manifest_index,
                &context,
                &mut fragments,
                &mut api_services,
                &mut errors,
            );
            manifest_index += 1;
        } else {
            fragments.extend(slots.next().into_iter().flatten());
        }
    }
    // The API's Service objects, as one fragment after every other (manifest/cache.rs).
    if !api_services.is_empty() {
        let mut services = Fragment::empty(PathBuf::from(API_SOURCE_PREFIX));
        services.announce.services = api_services;
        fragments.push(services);
    }
    let network: Vec<_> = fragments.iter_mut().map(|f| std::mem::take(&mut f.network)).collect();
    let check_references = errors.is_empty();
    let mut config = merge(fragments, check_references, &mut errors);
    if network_unavailable {
        // Just merged: the only holder, so nothing is copied.
        std::sync::Arc::make_mut(&mut config.announce).node.network_unavailable = true;
    }
    config.network = super::network_validate::merge(
        network,
        config.announce.node.name.as_deref(),
        &node_labels,
        &super::network_validate::network_vrfs(&config),
        &mut errors,
    );
    if errors.is_empty() {
        Ok(config)
    } else {
        Err(ConfigErrors(errors))
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;
    use std::time::Duration;

    use ipnet::IpNet;

    use super::super::{
        AddressFamily, AdvertisePolicy, AllowMode, BfdProfile, BgpConfig, Community,
        CommunityPrefixes, Neighbor, PrefixMatch, ReceivePolicy, RemoteAsn, Router,
    };
    use super::*;

    fn net(text: &str) -> IpNet {
        text.parse().unwrap()
    }

    const MAIN: &str = "[[bgp.routers]]\nasn = 65801\nprefixes = [\"10.128.7.0/24\"]\n";

    #[test]
    fn conf_d_fragments_are_read_in_file_name_order() {
        let dir = tempfile::tempdir().unwrap();
        let main = dir.path().join("uplink.toml");
        std::fs::write(&main, MAIN).unwrap();
        let conf_d = dir.path().join(FRAGMENT_DIR);
        std::fs::create_dir(&conf_d).unwrap();
        let neighbor = |address: &str| {
            format!("[[bgp.routers]]\nasn = 65801\n[[bgp.routers.neighbors]]\naddress = \"{address}\"\nasn = 65102\n")
        };
        std::fs::write(conf_d.join("20-second.toml"), neighbor("172.18.20.2")).unwrap();
        std::fs::write(conf_d.join("10-first.toml"), neighbor("172.18.20.1")).unwrap();
        // Not fragments: hidden files, other extensions, directories.
        std::fs::write(conf_d.join(".10-swap.toml"), "not toml [").unwrap();
        std::fs::write(conf_d.join("README"), "not toml [").unwrap();
        std::fs::write(conf_d.join("30-disabled.toml.bak"), "not toml [").unwrap();
        std::fs::create_dir(conf_d.join("40-dir.toml")).unwrap();

        let expected_files =
            vec![main.clone(), conf_d.join("10-first.toml"), conf_d.join("20-second.toml")];
        assert_eq!(config_files(&main).unwrap(), expected_files);
        let config = load(&main).unwrap();
        assert_eq!(config.files, expected_files);
        let router = &config.bgp.routers[0];
        let addresses: Vec<String> =
            router.neighbors.iter().map(|n| n.address.to_string()).collect();
        assert_eq!(addresses, vec!["172.18.20.1", "172.18.20.2"]);
        assert_eq!(router.sources, expected_files);
        assert_eq!(router.neighbors[1].sources, vec![conf_d.join("20-second.toml")]);
    }

    #[test]
    fn no_conf_d_is_fine_and_a_missing_main_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let main = dir.path().join("uplink.toml");
        let errors = load(&main).unwrap_err().0;
        assert_eq!(errors.len(), 1);
        assert_eq!(
            (errors[0].file.as_path(), errors[0].line, errors[0].field.as_str()),
            (main.as_path(), 0, "")
        );
        assert!(errors[0].message.starts_with("cannot read config file:"), "{}", errors[0].message);
        std::fs::write(&main, MAIN).unwrap();
        assert_eq!(load(&main).unwrap().files, vec![main]);
    }

    #[test]
    fn errors_from_every_file_are_collected() {
        let dir = tempfile::tempdir().unwrap();
        let main = dir.path().join("uplink.toml");
        std::fs::write(&main, "[[bgp.routers]]\nasn = 0\n").unwrap();
        let conf_d = dir.path().join(FRAGMENT_DIR);
        std::fs::create_dir(&conf_d).unwrap();
        std::fs::write(conf_d.join("a.toml"), "always_block = [\"10.0.0.1/8\"]\n").unwrap();
        std::fs::write(conf_d.join("b.toml"), "[bgp\n").unwrap();
        let errors = load(&main).unwrap_err();
        let found: Vec<(PathBuf, usize, usize)> =
            errors.0.iter().map(|e| (e.file.clone(), e.line, e.column)).collect();
        assert_eq!(
            found,
            vec![
                (main.clone(), 2, 7),
                (conf_d.join("a.toml"), 1, 17),
                (conf_d.join("b.toml"), 1, 5)
            ]
        );
        let text = errors.to_string();
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(
            text.starts_with(&format!("{}:2:7: bgp.routers[0].asn: ", main.display())),
            "{text}"
        );
    }

    /// The documented example must always load, and mean what its comments say.
    #[test]
    fn example_config_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples/uplink.toml");
        let config = load(&path).unwrap_or_else(|errors| panic!("{errors}"));
        let pod_net = net("10.128.7.0/24");
        let vip = net("172.18.20.201/32");
        let neighbor = Neighbor {
            address: IpAddr::from([172, 18, 20, 1]),
            remote_asn: RemoteAsn::Fixed(65102),
            port: 179,
            source_address: None,
            password: None,
            hold_time: Duration::from_secs(90),
            keepalive_time: Duration::from_secs(30),
            send_hold_time: None,
            minimum_hold_time: Duration::from_secs(3),
            connect_time: Duration::from_secs(5),
            ebgp_multihop: None,
            ttl_security: None,
            passive: false,
            bfd_profile: Some("tor".into()),
            max_prefixes: None,
            graceful_restart: crate::config::GracefulRestartMode::Enabled,
            families: vec![AddressFamily::Ipv4Unicast],
            to_advertise: AdvertisePolicy {
                mode: AllowMode::Filtered,
                prefixes: vec![pod_net, vip],
                with_local_pref: vec![],
                with_community: vec![CommunityPrefixes {
                    community: Community::Large(65801, 0, 100),
                    prefixes: vec![vip],
                }],
            },
            to_receive: ReceivePolicy {
                mode: AllowMode::Filtered,
                prefixes: vec![PrefixMatch { prefix: net("0.0.0.0/0"), ge: None, le: None }],
            },
            sources: vec![path.clone()],
        };
        let expected = BgpConfig {
            routers: vec![Router {
                asn: 65801,
                id: None,
                vrf: String::new(),
                prefixes: vec![pod_net, vip],
                maximum_paths: 64,
                multipath_relax: true,
                install: true,
                table: None,
                metric: 20,
                neighbors: vec![neighbor],
                imports: vec![],
                sources: vec![path.clone()],
            }],
            bfd_profiles: vec![BfdProfile {
                name: "tor".into(),
                receive_interval: Duration::from_millis(300),
                transmit_interval: Duration::from_millis(300),
                detect_multiplier: 3,
                echo_interval: Duration::from_millis(50),
                echo_mode: false,
                passive_mode: false,
                minimum_ttl: 254,
                authentication: None,
            }],
            default_max_prefixes: None,
        };
        assert_eq!(config.bgp, expected);
        assert_eq!(config.always_block, vec![net("127.0.0.0/8"), net("169.254.0.0/16")]);

        let json = serde_json::to_value(&config).unwrap();
        let neighbor = &json["bgp"]["routers"][0]["neighbors"][0];
        assert_eq!(neighbor["hold_time"], "1m30s");
        assert_eq!(neighbor["remote_asn"], 65102);
        assert_eq!(neighbor["to_advertise"]["with_community"][0]["community"], "large:65801:0:100");
        assert_eq!(neighbor["to_receive"]["prefixes"][0]["prefix"], "0.0.0.0/0");
    }

    #[test]
    fn load_str_names_the_file_in_errors() {
        let errors = load_str("inline.toml", "bgp = 1\n").unwrap_err();
        assert_eq!(errors.0[0].file, PathBuf::from("inline.toml"));
        assert_eq!(
            (errors.0[0].line, errors.0[0].column, errors.0[0].field.as_str()),
            (1, 7, "bgp")
        );
        assert_eq!(errors.0[0].message, "invalid type: integer `1`, expected a [bgp] table");
    }
}

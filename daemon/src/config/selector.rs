//! Kubernetes label selectors (`matchLabels` + `matchExpressions`), matched against the
//! node's, a pool's, a service's or a network's labels.
//!
//! Semantics as in `k8s.io/apimachinery/pkg/labels`: every `match_labels` pair and every
//! expression must hold; an empty selector matches everything.

use serde::Serialize;

use super::announce::Labels;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl Operator {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "In" => Some(Self::In),
            "NotIn" => Some(Self::NotIn),
            "Exists" => Some(Self::Exists),
            "DoesNotExist" => Some(Self::DoesNotExist),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    pub values: Vec<String>,
}

impl Requirement {
    fn matches(&self, labels: &Labels) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            Operator::In => value.is_some_and(|v| self.values.contains(v)),
            // Kubernetes: NotIn also matches when the label is absent.
            Operator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
pub struct LabelSelector {
    pub match_labels: Labels,
    pub match_expressions: Vec<Requirement>,
}

impl LabelSelector {
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    pub fn matches(&self, labels: &Labels) -> bool {
        self.match_labels.iter().all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| r.matches(labels))
    }
}

/// MetalLB's rule for selector lists (`node_selectors`, `service_selectors`, ...): an empty
/// list matches everything, otherwise any one selector must match.
pub fn any_matches(selectors: &[LabelSelector], labels: &Labels) -> bool {
    selectors.is_empty() || selectors.iter().any(|s| s.matches(labels))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    fn req(key: &str, operator: Operator, values: &[&str]) -> Requirement {
        Requirement {
            key: key.into(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    #[test]
    fn empty_selector_matches_everything() {
        assert!(LabelSelector::default().matches(&Labels::new()));
        assert!(LabelSelector::default().matches(&labels(&[("a", "b")])));
    }

    #[test]
    fn match_labels_need_every_pair() {
        let selector = LabelSelector {
            match_labels: labels(&[("zone", "a"), ("role", "worker")]),
            match_expressions: vec![],
        };
        assert!(selector.matches(&labels(&[("zone", "a"), ("role", "worker"), ("x", "y")])));
        assert!(!selector.matches(&labels(&[("zone", "a")])));
        assert!(!selector.matches(&labels(&[("zone", "b"), ("role", "worker")])));
    }

    #[test]
    fn expressions_follow_kubernetes_semantics() {
        let node = labels(&[("kubernetes.io/metadata.name", "proj2"), ("tier", "gold")]);
        let check = |r: Requirement| {
            LabelSelector { match_labels: Labels::new(), match_expressions: vec![r] }.matches(&node)
        };
        assert!(check(req("kubernetes.io/metadata.name", Operator::In, &["proj2", "proj3"])));
        assert!(!check(req("kubernetes.io/metadata.name", Operator::In, &["proj3"])));
        assert!(check(req("tier", Operator::NotIn, &["silver"])));
        assert!(check(req("absent", Operator::NotIn, &["x"])));
        assert!(!check(req("tier", Operator::NotIn, &["gold"])));
        assert!(check(req("tier", Operator::Exists, &[])));
        assert!(!check(req("absent", Operator::Exists, &[])));
        assert!(check(req("absent", Operator::DoesNotExist, &[])));
        assert!(!check(req("tier", Operator::DoesNotExist, &[])));
    }

    #[test]
    fn selector_lists_match_any_and_empty_means_all() {
        let gold =
            LabelSelector { match_labels: labels(&[("tier", "gold")]), match_expressions: vec![] };
        let silver = LabelSelector {
            match_labels: labels(&[("tier", "silver")]),
            match_expressions: vec![],
        };
        assert!(any_matches(&[], &Labels::new()));
        assert!(any_matches(&[silver.clone(), gold.clone()], &labels(&[("tier", "gold")])));
        assert!(!any_matches(&[silver], &labels(&[("tier", "gold")])));
        assert_eq!(Operator::parse("NotIn"), Some(Operator::NotIn));
        assert_eq!(Operator::parse("notin"), None);
    }
}

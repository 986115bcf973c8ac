//! Reading manifests: every file given (a directory: its `.yaml`, `.yml` and `.json` files, recursively, in name
//! order), every YAML document of a file (JSON is YAML too: flow style, anchors and merge keys as kubectl reads
//! them), every item of a `List` (`kind: List`, `PodList`, `DeploymentList`, …). What comes out is each object
//! as the apiserver would hold it (resource quantities written as YAML numbers become strings) with where it
//! came from, sorted into what the webhooks see ([`Input`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::Deserialize as _;
use serde_json::{Value, json};

use gpu_admission_core::pod::templates::pod_templates;
use gpu_admission_core::policy::{PolicySnapshot, TierScope};

/// One object of the input and where it came from.
#[derive(Debug, Clone)]
pub struct Source {
    /// `path/to/file.yaml#2` (document 2; `#2/items/0` for an item of a List).
    pub origin: String,
    pub value: Value,
}

/// What an object of the input is to the webhooks.
#[derive(Debug, Clone)]
pub enum Input {
    /// A Pod, or any object holding pod templates (a workload, a custom resource).
    Object(Source),
    /// A whole AdmissionReview (or a bare AdmissionRequest, wrapped): decided exactly as given.
    Review(Source),
    /// A Namespace: its labels; the policy's tier label among them tells the tier of its objects.
    Namespace {
        name: String,
        labels: BTreeMap<String, String>,
    },
    /// Anything else (ConfigMaps, Services, CRDs, …): not the webhooks' business.
    Ignored(Source),
}

/// Every file under `paths`: files as given, directories walked for `.yaml`/`.yml`/`.json` files.
pub fn files(paths: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            walk_dir(p, &mut out)?;
        } else if p.is_file() {
            out.push(p.clone());
        } else {
            bail!("{}: no such file or directory", p.display());
        }
    }
    Ok(out)
}

fn walk_dir(dir: &Path, out: &mut Vec<PathBuf>) -> anyhow::Result<()> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk_dir(&p, out)?;
        } else if p
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
        {
            out.push(p);
        }
    }
    Ok(())
}

/// Parses multi-document YAML (or JSON) into JSON values, merge keys applied; empty and null documents are
/// skipped. Each value comes with its document index.
pub fn parse_documents(text: &str) -> anyhow::Result<Vec<(usize, Value)>> {
    let mut docs = Vec::new();
    for (i, de) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let mut y =
            serde_yaml::Value::deserialize(de).with_context(|| format!("YAML document {i}"))?;
        y.apply_merge()
            .with_context(|| format!("YAML document {i}: merge keys"))?;
        let v: Value = serde_yaml::from_value(y).with_context(|| format!("YAML document {i}"))?;
        if !v.is_null() {
            docs.push((i, v));
        }
    }
    Ok(docs)
}

/// Every input of `files`, in file and document order.
pub fn inputs(files: &[PathBuf]) -> anyhow::Result<Vec<Input>> {
    let mut out = Vec::new();
    for path in files {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let docs = parse_documents(&text).with_context(|| format!("parsing {}", path.display()))?;
        for (i, doc) in docs {
            classify(doc, format!("{}#{i}", path.display()), &mut out);
        }
    }
    Ok(out)
}

fn kind_of(v: &Value) -> &str {
    v.get("kind").and_then(Value::as_str).unwrap_or("")
}

/// Sorts one document (a List's items one by one) into [`Input`]s.
pub fn classify(mut value: Value, origin: String, out: &mut Vec<Input>) {
    let kind = kind_of(&value).to_string();
    if kind.ends_with("List")
        && let Some(items) = value.get_mut("items").and_then(Value::as_array_mut)
    {
        for (i, item) in std::mem::take(items).into_iter().enumerate() {
            classify(item, format!("{origin}/items/{i}"), out);
        }
        return;
    }
    if kind == "AdmissionReview" || (value.get("request").is_none() && is_bare_request(&value)) {
        if kind != "AdmissionReview" {
            value = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": value});
        }
        out.push(Input::Review(Source { origin, value }));
        return;
    }
    if kind == "Namespace" {
        let meta = &value["metadata"];
        out.push(Input::Namespace {
            name: meta["name"].as_str().unwrap_or("").to_string(),
            labels: meta["labels"]
                .as_object()
                .into_iter()
                .flatten()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect(),
        });
        return;
    }
    normalise_quantities(&mut value);
    // DRA claims and claim templates are validated against their tier like Pods (`validate_claim`).
    let is_claim = matches!(kind.as_str(), "ResourceClaim" | "ResourceClaimTemplate")
        && value["apiVersion"]
            .as_str()
            .is_some_and(|v| v.starts_with("resource.k8s.io/"));
    // A Pod always goes to the webhooks, readable or not (one that cannot be read as a Pod is undecidable:
    // `/validate-pod` says so, denied in Enforce), never "ignored".
    let is_pod = kind == "Pod" && value["apiVersion"] == "v1";
    let describes_pods = is_pod || is_claim || !pod_templates(&value).is_empty();
    let source = Source { origin, value };
    out.push(if describes_pods && value_is_object(&source.value) {
        Input::Object(source)
    } else {
        Input::Ignored(source)
    });
}

fn value_is_object(v: &Value) -> bool {
    v.is_object() && !kind_of(v).is_empty()
}

/// A bare AdmissionRequest (the shape some projects keep as fixtures): a uid, an operation and a kind.
fn is_bare_request(v: &Value) -> bool {
    v.get("operation").is_some_and(Value::is_string)
        && v.get("uid").is_some()
        && v.get("kind").is_some_and(Value::is_object)
}

/// Resource quantities written as YAML numbers become strings, as the apiserver serialises them.
pub fn normalise_quantities(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (k, child) in map.iter_mut() {
                if matches!(k.as_str(), "requests" | "limits" | "overhead")
                    && let Some(q) = child.as_object_mut()
                {
                    for val in q.values_mut().filter(|v| v.is_number()) {
                        *val = json!(val.to_string());
                    }
                }
                normalise_quantities(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalise_quantities),
        _ => {}
    }
}

/// The tiers of namespaces: `--namespace NS=TIER` first, then the Namespace objects of the input, then the
/// fallback of `--namespace '*=TIER'`. A namespace with none of these has no tier label: the policy's `untieredNamespaces` decides (`defaultTier` by default), as in the webhooks.
#[derive(Debug, Clone, Default)]
pub struct Tiers {
    explicit: BTreeMap<String, String>,
    from_input: BTreeMap<String, String>,
    fallback: Option<String>,
}

impl Tiers {
    /// From `NS=TIER` arguments (`*=TIER` for every other namespace).
    pub fn parse(pairs: &[String]) -> anyhow::Result<Self> {
        let mut t = Tiers::default();
        for p in pairs {
            match p.split_once('=') {
                Some(("*", tier)) if !tier.is_empty() => t.fallback = Some(tier.to_string()),
                Some((ns, tier)) if !ns.is_empty() && !tier.is_empty() => {
                    t.explicit.insert(ns.to_string(), tier.to_string());
                }
                _ => bail!("--namespace {p:?}: expected NAMESPACE=TIER (or *=TIER)"),
            }
        }
        Ok(t)
    }

    /// Takes the tier labels (`tier_label`, the policy's) of the input's Namespace objects (an explicit
    /// `--namespace` wins).
    pub fn learn(&mut self, inputs: &[Input], tier_label: &str) {
        for i in inputs {
            if let Input::Namespace { name, labels } = i
                && let Some(tier) = labels.get(tier_label)
            {
                self.from_input.insert(name.clone(), tier.clone());
            }
        }
    }

    /// Every tier given (by `--namespace` or a Namespace of the input) that names no tier of the policy, as a
    /// warning that says which tier the webhooks hold the namespace to instead ([`PolicySnapshot::tier_for`]).
    pub fn unknown(&self, policy: &PolicySnapshot) -> Vec<String> {
        let given = self
            .explicit
            .iter()
            .map(|(ns, t)| {
                (
                    format!("--namespace {ns}={t}"),
                    format!("namespace {ns}"),
                    t,
                )
            })
            .chain(
                self.from_input
                    .iter()
                    .filter(|(ns, _)| !self.explicit.contains_key(*ns))
                    .map(|(ns, t)| {
                        (
                            format!("Namespace {ns} (tier label {t})"),
                            format!("namespace {ns}"),
                            t,
                        )
                    }),
            )
            .chain(self.fallback.iter().map(|t| {
                (
                    format!("--namespace *={t}"),
                    "every other namespace".to_string(),
                    t,
                )
            }));
        let tiers: Vec<&str> = policy.tiers().iter().map(|t| t.name.as_str()).collect();
        let mut out = Vec::new();
        for (source, what, tier) in given {
            let instead = match policy.tier_for(Some(tier)) {
                TierScope::Tier(_) => continue,
                TierScope::Defaulted { tier: default, .. } => {
                    format!("{what} is held to the default tier {default} instead")
                }
                TierScope::Denied(_) => format!(
                    "{what} is untiered: under untieredNamespaces: Deny its GPU Pods and Pods naming a PriorityClass are denied"
                ),
                TierScope::Ignored(_) => format!(
                    "{what} is untiered: under untieredNamespaces: Ignore its Pods are held to no tier"
                ),
            };
            out.push(format!(
                "{source}: the policy has no tier {tier:?} (its tiers: {}); {instead}, as the webhooks do",
                tiers.join(", ")
            ));
        }
        out
    }

    pub fn tier_of(&self, namespace: &str) -> Option<String> {
        self.explicit
            .get(namespace)
            .or_else(|| self.from_input.get(namespace))
            .or(self.fallback.as_ref())
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpu_admission_core::names::DEFAULT_TIER_LABEL;

    fn sorted(text: &str) -> Vec<Input> {
        let mut out = Vec::new();
        for (i, d) in parse_documents(text).unwrap() {
            classify(d, format!("f#{i}"), &mut out);
        }
        out
    }

    #[test]
    fn lists_flow_style_reviews_namespaces_and_others() {
        let inputs = sorted(
            "---\n\
             {apiVersion: v1, kind: List, items: [\
               {apiVersion: v1, kind: Pod, metadata: {name: a}, spec: {containers: [{name: c, resources: {limits: {nvidia.com/gpu: 1}}}]}},\
               {apiVersion: v1, kind: ConfigMap, metadata: {name: cm}}]}\n\
             ---\n\
             apiVersion: v1\nkind: Namespace\nmetadata: {name: ml, labels: {tenant.kubenexus.io/tier: gold}}\n\
             ---\n\
             ---\n\
             {uid: u1, kind: {group: '', version: v1, kind: Pod}, operation: CREATE}\n\
             ---\n\
             {apiVersion: example.com/v1, kind: Trainer, metadata: {name: t}, spec: {workers: {template: {spec: {containers: []}}}}}\n",
        );
        assert_eq!(inputs.len(), 5, "{inputs:?}");
        match &inputs[0] {
            Input::Object(s) => {
                assert_eq!(s.origin, "f#0/items/0");
                // A quantity written as a number reads as the apiserver's string.
                assert_eq!(
                    s.value["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"],
                    "1"
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(&inputs[1], Input::Ignored(s) if s.origin == "f#0/items/1"));
        assert!(
            matches!(&inputs[2], Input::Namespace { name, labels } if name == "ml" && labels[DEFAULT_TIER_LABEL] == "gold")
        );
        match &inputs[3] {
            Input::Review(s) => {
                assert_eq!(s.origin, "f#3");
                assert_eq!(s.value["request"]["uid"], "u1");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(&inputs[4], Input::Object(s) if s.value["kind"] == "Trainer"));
    }

    #[test]
    fn tiers_explicit_then_namespaces_then_fallback() {
        let mut t = Tiers::parse(&["ml=silver".into(), "*=bronze".into()]).unwrap();
        let gold = BTreeMap::from([(DEFAULT_TIER_LABEL.to_string(), "gold".to_string())]);
        let other_label = BTreeMap::from([("example.com/tier".to_string(), "gold".to_string())]);
        t.learn(
            &[
                Input::Namespace {
                    name: "ml".into(),
                    labels: gold.clone(),
                },
                Input::Namespace {
                    name: "prod".into(),
                    labels: gold,
                },
                Input::Namespace {
                    name: "elsewhere".into(),
                    labels: other_label,
                },
            ],
            DEFAULT_TIER_LABEL,
        );
        assert_eq!(t.tier_of("ml").as_deref(), Some("silver"));
        assert_eq!(t.tier_of("prod").as_deref(), Some("gold"));
        assert_eq!(t.tier_of("other").as_deref(), Some("bronze"));
        // Another label than the policy's tier label names no tier.
        assert_eq!(t.tier_of("elsewhere").as_deref(), Some("bronze"));
        assert!(Tiers::parse(&["nonsense".into()]).is_err());
        assert_eq!(Tiers::parse(&[]).unwrap().tier_of("x"), None);
    }
}

//! THE rule for how many GPUs a Pod asks for, of which vendor and with how much memory, driven by the policy's
//! `gpuResources` list (whole devices, shared devices, MIG slices, HAMi memory/cores, DRA DeviceClasses).
//! The frontend and loadgen's workload generator use this one implementation; the test oracle
//! (`gpu_admission_testkit::gpu`) re-states it independently on purpose.
//!
//! Quantities are Kubernetes quantities (`"1000m"` = 1, `"1k"` = 1000, `"2Ki"` = 2048): a fractional device
//! count is rounded up and an absurd one clamped to [`MAX_GPUS_PER_POD`], each with a warning, never silently.

use std::collections::BTreeMap;

use gpu_admission_policy::Vendor;
use gpu_admission_policy::gpu_resources::{
    DEVICE_CLASS_RESOURCE_PREFIX, GpuResourceKind, GpuResourceRule, Matcher, default_rules,
};
use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::api::resource::v1::{
    DeviceClass, ResourceClaim, ResourceClaimSpec, ResourceClaimTemplate,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube_quantity::ParsedQuantity;

use super::pod_group::EntryClaim;
use crate::dra::device_class::{self, Selects};

/// More GPUs than any node has: a larger count is clamped (with a warning) rather than sent as is.
pub const MAX_GPUS_PER_POD: u32 = 256;

/// The policy's GPU resource rules (the built-in default list when the policy has none), and the catalog's
/// own DeviceClasses (`<class>.gpu-admission.io`, always GPUs).
#[derive(Debug, Clone, PartialEq)]
pub struct GpuResources {
    rules: Vec<GpuResourceRule>,
    /// The catalog's DeviceClasses, their catalog class and vendor.
    catalog_classes: Vec<(String, String, Vendor)>,
    /// The DRA drivers whose devices are GPUs: every vendor's, then the catalog classes' own.
    gpu_drivers: Vec<String>,
    /// The rules compiled once: container resources, DRA DeviceClasses.
    resources: Matcher,
    device_classes: Matcher,
}

impl Default for GpuResources {
    fn default() -> Self {
        Self::compiled(default_rules())
    }
}

/// How one resource name counts, once matched against the rules.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Counting {
    /// `None` for a GPU whose vendor the rules do not say (a `*.gpu-admission.io` DeviceClass outside the
    /// catalog).
    pub vendor: Option<Vendor>,
    pub kind: GpuResourceKind,
    /// GiB per device (MIG: the slice's memory) or per quantity unit (MEMORY).
    pub memory_gib: Option<f64>,
}

pub use gpu_admission_policy::gpu_resources::match_pattern;

impl GpuResources {
    /// The rules of a policy; an empty list means the built-in default.
    pub fn from_rules(rules: &[GpuResourceRule]) -> Self {
        if rules.is_empty() {
            Self::default()
        } else {
            Self::compiled(rules.to_vec())
        }
    }

    fn compiled(rules: Vec<GpuResourceRule>) -> Self {
        fn name(r: &GpuResourceRule) -> &str {
            r.name.as_str()
        }
        let resources = Matcher::new(&rules, name, |r| r.kind != GpuResourceKind::DraDeviceClass);
        let device_classes = Matcher::new(&rules, name, |r| {
            matches!(
                r.kind,
                GpuResourceKind::DraDeviceClass | GpuResourceKind::NotGpu
            )
        });
        Self {
            rules,
            catalog_classes: Vec::new(),
            gpu_drivers: Vendor::ALL
                .iter()
                .map(|v| v.facts().dra_driver.to_string())
                .collect(),
            resources,
            device_classes,
        }
    }

    /// With the DeviceClasses of a policy's catalog (see `gpu_admission_policy::device_classes`).
    pub fn with_catalog(mut self, policy: &gpu_admission_policy::Policy) -> Self {
        self.catalog_classes = policy
            .classes
            .iter()
            .filter(|c| c.dra.is_some())
            .map(|c| {
                (
                    gpu_admission_policy::device_classes::device_class_name(&c.name),
                    c.name.clone(),
                    c.vendor,
                )
            })
            .collect();
        for c in &policy.classes {
            if let Some(dra) = &c.dra
                && !self.gpu_drivers.contains(&dra.driver)
            {
                self.gpu_drivers.push(dra.driver.clone());
            }
        }
        self
    }

    /// What a DeviceClass of the cluster selects (see [`crate::dra::device_class`]).
    pub fn judge(&self, class: &DeviceClass) -> Selects {
        let no_selectors = Default::default();
        device_class::judge(
            class.spec.as_ref().unwrap_or(&no_selectors),
            &self.gpu_drivers,
        )
    }

    /// Whether a DeviceClass's devices are GPUs: by what the cluster's class of that name selects
    /// (`cluster`) when the cluster holds one, whatever its name (a class named like one the rules call
    /// `notGpu` may select H100s: who may create DeviceClasses chooses the name); by its name
    /// ([`Self::gpu_device_class`]) only when the class is not known. An undecidable class counts as GPUs.
    pub fn device_class_gpus(
        &self,
        device_class: &str,
        cluster: &dyn ClaimTemplates,
    ) -> Option<GpuDeviceClass> {
        let Some(class) = cluster.device_class(device_class) else {
            return self.gpu_device_class(device_class);
        };
        match self.judge(&class) {
            Selects::NotGpus => None,
            Selects::Gpus { vendor, .. } => Some(GpuDeviceClass { vendor }),
            Selects::Undecidable(_) => Some(GpuDeviceClass { vendor: None }),
        }
    }

    /// The DeviceClass a container resource asks devices of, when it is an extended resource backed by one:
    /// `deviceclass.resource.kubernetes.io/<class>`, or a cluster class's `extendedResourceName`.
    pub fn backing_device_class(
        &self,
        resource: &str,
        cluster: &dyn ClaimTemplates,
    ) -> Option<String> {
        if let Some(class) = resource.strip_prefix(DEVICE_CLASS_RESOURCE_PREFIX) {
            return Some(class.to_string());
        }
        if !is_extended_resource(resource) {
            return None;
        }
        cluster
            .device_class_for_resource(resource)
            .and_then(|c| c.metadata.name)
    }

    pub fn rules(&self) -> &[GpuResourceRule] {
        &self.rules
    }

    /// The catalog class whose devices a DeviceClass of the catalog selects (`h100-80gb.gpu-admission.io` →
    /// `H100-80GB`); `None` for any other DeviceClass.
    pub fn catalog_class_of(&self, device_class: &str) -> Option<&str> {
        self.catalog_classes
            .iter()
            .find(|(n, _, _)| n == device_class)
            .map(|(_, class, _)| class.as_str())
    }

    /// How a container resource name counts, or `None` when it is not a GPU resource. A resource backed by a
    /// DRA DeviceClass (`deviceclass.resource.kubernetes.io/<class>`) counts as devices of a GPU class.
    pub fn counting(&self, resource: &str) -> Option<Counting> {
        if let Some(class) = resource.strip_prefix(DEVICE_CLASS_RESOURCE_PREFIX) {
            return self.gpu_device_class(class).map(|g| Counting {
                vendor: g.vendor,
                kind: GpuResourceKind::Devices,
                memory_gib: None,
            });
        }
        let (i, mig_memory) = self.resources.find(resource)?;
        let r = &self.rules[i];
        let kind = r.kind;
        let memory_gib = match kind {
            GpuResourceKind::NotGpu => return None,
            GpuResourceKind::MigSlices => mig_memory,
            GpuResourceKind::Memory => Some(r.memory_gib_per_unit),
            _ => None,
        };
        Some(Counting {
            vendor: Some(r.vendor),
            kind,
            memory_gib,
        })
    }

    /// Whether a DRA DeviceClass's devices are GPUs, and their vendor: the catalog's own classes (and any
    /// other `*.gpu-admission.io`, vendor unknown), then the policy's `draDeviceClass` rules less its `notGpu`
    /// ones. `None`: not a GPU DeviceClass.
    pub fn gpu_device_class(&self, device_class: &str) -> Option<GpuDeviceClass> {
        if let Some((_, _, v)) = self
            .catalog_classes
            .iter()
            .find(|(n, _, _)| n == device_class)
        {
            return Some(GpuDeviceClass { vendor: Some(*v) });
        }
        if device_class.ends_with(gpu_admission_policy::device_classes::SUFFIX) {
            return Some(GpuDeviceClass { vendor: None });
        }
        let (i, _) = self.device_classes.find(device_class)?;
        let r = &self.rules[i];
        (r.kind == GpuResourceKind::DraDeviceClass).then_some(GpuDeviceClass {
            vendor: Some(r.vendor),
        })
    }
}

/// A DeviceClass whose devices are GPUs ([`GpuResources::gpu_device_class`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GpuDeviceClass {
    /// `None` when the rules do not say (a `*.gpu-admission.io` class outside the catalog).
    pub vendor: Option<Vendor>,
}

/// An extended resource a DeviceClass may name (`example.com/h100`): a domain-prefixed name outside
/// Kubernetes' own `kubernetes.io` domains (CPU, memory and hugepages are not).
fn is_extended_resource(resource: &str) -> bool {
    resource
        .split_once('/')
        .is_some_and(|(domain, _)| domain != "kubernetes.io" && !domain.ends_with(".kubernetes.io"))
}

/// The DRA objects the frontend can read: the ResourceClaimTemplates and ResourceClaims (by namespace and
/// name) Pods name, and the cluster's DeviceClasses.
pub trait ClaimTemplates {
    fn template(&self, namespace: &str, name: &str) -> Option<ResourceClaimTemplate>;
    /// A ResourceClaim a Pod names directly (`resourceClaimName`).
    fn claim(&self, _namespace: &str, _name: &str) -> Option<ResourceClaim> {
        None
    }
    /// A DeviceClass by name (`None`: not known, or DRA not served).
    fn device_class(&self, _name: &str) -> Option<DeviceClass> {
        None
    }
    /// The DeviceClass whose `spec.extendedResourceName` is `resource`.
    fn device_class_for_resource(&self, _resource: &str) -> Option<DeviceClass> {
        None
    }
    /// A PodGroup (`scheduling.k8s.io/v1beta1`) by namespace and name (`None`: not known, or not served).
    fn pod_group(
        &self,
        _namespace: &str,
        _name: &str,
    ) -> Option<k8s_openapi::api::scheduling::v1beta1::PodGroup> {
        None
    }
}

/// No template is readable (an apiserver without DRA, or a caller without a template source).
pub struct NoClaimTemplates;

impl ClaimTemplates for NoClaimTemplates {
    fn template(&self, _: &str, _: &str) -> Option<ResourceClaimTemplate> {
        None
    }
}

impl<F: Fn(&str, &str) -> Option<ResourceClaimTemplate>> ClaimTemplates for F {
    fn template(&self, namespace: &str, name: &str) -> Option<ResourceClaimTemplate> {
        self(namespace, name)
    }
}

/// What one GPU resource of a container, or one DRA request, may be allocated: how quotas count it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Holding {
    /// Whole devices.
    Devices(u32),
    /// MIG slices of `memory_gib` each (where the rule states it).
    Slices { count: u32, memory_gib: Option<f64> },
    /// Shares of devices (HAMi memory and cores), `memory_gib` each where stated.
    Shares { count: u32, memory_gib: Option<f64> },
    /// Every device of one Node of its class (a DRA request of allocation mode `All`).
    AllOfNode,
}

/// A Pod's holdings, grouped the way Kubernetes sums effective requests.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Holdings {
    /// App containers and restartable (sidecar) init containers: held together.
    pub running: Vec<Holding>,
    /// Each plain init container's, held one at a time before the others start.
    pub init: Vec<Vec<Holding>>,
    /// The readable DRA claims' GPU requests (each at its largest `firstAvailable` alternative).
    pub claims: Vec<Holding>,
}

/// What a Pod asks for in GPUs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuAsk {
    /// Devices (Kubernetes effective-request rules over containers and init containers, plus DRA claims).
    pub count: u32,
    /// The vendor of its first GPU resource whose vendor is known.
    pub vendor: Option<Vendor>,
    /// GPU memory per device stated by the resources (MIG slice, HAMi memory), GiB.
    pub memory_gib: Option<f64>,
    /// The kinds of request seen, e.g. `devices`, `mig`, `devices+memory`, `dra` (for reports).
    pub shape: String,
    /// DRA claims of the Pod (`spec.resourceClaims` names).
    pub dra_claims: Vec<String>,
    /// The GPU DeviceClasses it takes devices from: those of its implicit extended resources, then its
    /// readable claims' (each once).
    pub dra_device_classes: Vec<String>,
    /// The DeviceClasses of the cluster its container resources ask devices of with no claim
    /// (`deviceclass.resource.kubernetes.io/<class>` or a class's `extendedResourceName`) that the policy
    /// does not name and whose selectors select GPUs: held to the tier at the Pod, as no claim exists before
    /// the scheduler makes one.
    pub implicit_device_classes: Vec<String>,
    /// The DRA claims whose template or claim could not be read: whether they ask for GPUs is unknown.
    pub unresolved_claims: Vec<String>,
    /// GPU resources whose quantity is no Kubernetes quantity (`container "c": nvidia.com/gpu="one"`): how
    /// many GPUs the Pod asks for cannot be told (undecidable, denied in Enforce by `/validate-pod`).
    pub unreadable_quantities: Vec<String>,
    /// What it may be allocated, resource by resource (quotas count this, not `count`).
    pub holdings: Holdings,
    pub warnings: Vec<String>,
}

fn kind_name(kind: GpuResourceKind) -> &'static str {
    match kind {
        GpuResourceKind::Devices => "devices",
        GpuResourceKind::SharedDevices => "shared",
        GpuResourceKind::MigSlices => "mig",
        GpuResourceKind::Memory => "memory",
        GpuResourceKind::Cores => "cores",
        GpuResourceKind::DraDeviceClass => "dra",
        GpuResourceKind::NotGpu => "other",
    }
}

/// A device count from a quantity: rounded up when fractional and clamped when absurd, with a warning.
/// The whole devices a quantity of `value` (already read) asks for; `what` names it in warnings.
fn device_count(
    value: f64,
    what: impl Fn() -> String,
    q: &Quantity,
    warnings: &mut Vec<String>,
) -> u32 {
    let rounded = value.ceil();
    if rounded != value {
        warnings.push(format!(
            "{}={:?} is not a whole number of devices; counted as {rounded}",
            what(),
            q.0
        ));
    }
    if rounded > f64::from(MAX_GPUS_PER_POD) {
        warnings.push(format!(
            "{}={:?} is more GPUs than any node has; counted as {MAX_GPUS_PER_POD}",
            what(),
            q.0
        ));
        return MAX_GPUS_PER_POD;
    }
    rounded as u32
}

/// A non-negative finite quantity as a number.
fn quantity_value(q: &Quantity) -> Option<f64> {
    // Most GPU counts are a few plain digits ("1", "8"): their value is the integer itself (kube_quantity's
    // parse costs ~1,200 instructions each).
    let digits = q.0.as_bytes();
    if (1..=15).contains(&digits.len()) && digits.iter().all(u8::is_ascii_digit) {
        return q.0.parse::<u64>().ok().map(|n| n as f64);
    }
    let parsed: Result<ParsedQuantity, _> = q.try_into();
    parsed
        .ok()
        .and_then(|p| p.to_bytes_f64())
        .filter(|v| v.is_finite() && *v >= 0.0)
}

/// One container: devices, vendor, memory per device, kinds seen.
#[derive(Default)]
struct ContainerAsk {
    devices: u32,
    vendor: Option<Vendor>,
    memory_gib: Option<f64>,
    kinds: Vec<GpuResourceKind>,
    /// GPU resources of the container whose quantity cannot be read.
    unreadable: Vec<String>,
    /// The cluster DeviceClasses its extended resources are backed by (GPU classes judged by their selectors).
    device_classes: Vec<String>,
    holdings: Vec<Holding>,
}

/// How warnings name a container's resource (built only when there is a warning).
fn what(container: &str, resource: &str) -> String {
    format!("container {container:?}: {resource}")
}

/// How a container resource counts: by the rules, else as devices of the cluster's DeviceClass backing it
/// when that class selects GPUs (the class is added to `classes`).
fn resource_counting(
    name: &str,
    rules: &GpuResources,
    cluster: &dyn ClaimTemplates,
    classes: &mut Vec<String>,
) -> Option<Counting> {
    if let Some(counting) = rules.counting(name) {
        return Some(counting);
    }
    let class = rules.backing_device_class(name, cluster)?;
    let gpu = rules.device_class_gpus(&class, cluster)?;
    if !classes.contains(&class) {
        classes.push(class);
    }
    Some(Counting {
        vendor: gpu.vendor,
        kind: GpuResourceKind::Devices,
        memory_gib: None,
    })
}

fn container_ask(
    c: &Container,
    rules: &GpuResources,
    cluster: &dyn ClaimTemplates,
    warnings: &mut Vec<String>,
) -> ContainerAsk {
    let mut out = ContainerAsk::default();
    let Some(res) = &c.resources else { return out };
    // For extended resources a limit alone implies the same request: the larger of the two counts.
    let mut per_resource: BTreeMap<&str, (Counting, &Quantity, f64)> = BTreeMap::new();
    for map in [&res.requests, &res.limits].into_iter().flatten() {
        for (name, q) in map {
            let Some(counting) = resource_counting(name, rules, cluster, &mut out.device_classes)
            else {
                continue;
            };
            let Some(v) = quantity_value(q) else {
                let unreadable = format!("{}={:?}", what(&c.name, name), q.0);
                warnings.push(format!(
                    "{unreadable} is not a Kubernetes quantity: how many GPUs it asks for cannot be told"
                ));
                out.unreadable.push(unreadable);
                continue;
            };
            let e = per_resource
                .entry(name.as_str())
                .or_insert((counting, q, v));
            if v > e.2 {
                *e = (counting, q, v);
            }
        }
    }
    let mut share_only = false;
    let mut share_memory: Option<f64> = None;
    let mut whole = Vec::new();
    for (name, (counting, q, value)) in per_resource {
        if value == 0.0 {
            continue;
        }
        if !out.kinds.contains(&counting.kind) {
            out.kinds.push(counting.kind);
        }
        out.vendor = out.vendor.or(counting.vendor);
        let what = || what(&c.name, name);
        match counting.kind {
            GpuResourceKind::Devices | GpuResourceKind::SharedDevices => {
                let n = device_count(value, what, q, warnings);
                out.devices = out.devices.saturating_add(n);
                whole.push(n);
            }
            GpuResourceKind::MigSlices => {
                let n = device_count(value, what, q, warnings);
                out.devices = out.devices.saturating_add(n);
                if let Some(m) = counting.memory_gib {
                    out.memory_gib = Some(out.memory_gib.map_or(m, |o: f64| o.max(m)));
                }
                out.holdings.push(Holding::Slices {
                    count: n,
                    memory_gib: counting.memory_gib,
                });
            }
            GpuResourceKind::Memory => {
                let gib = value * counting.memory_gib.unwrap_or(0.0);
                out.memory_gib = Some(out.memory_gib.map_or(gib, |o| o.max(gib)));
                share_memory = Some(share_memory.map_or(gib, |o| o.max(gib)));
                share_only = true;
            }
            GpuResourceKind::Cores => share_only = true,
            GpuResourceKind::DraDeviceClass | GpuResourceKind::NotGpu => {}
        }
    }
    // The devices of a container that also states a share (memory or cores) are shares; a share without a
    // device count is one device.
    for n in whole {
        out.holdings.push(if share_only {
            Holding::Shares {
                count: n,
                memory_gib: share_memory,
            }
        } else {
            Holding::Devices(n)
        });
    }
    if out.devices == 0 && share_only {
        out.devices = 1;
        out.holdings.push(Holding::Shares {
            count: 1,
            memory_gib: share_memory,
        });
    }
    out
}

/// What a claim's requests take from GPU DeviceClasses (the DeviceClasses they name are added to `classes`):
/// the devices the Pod asks for (a `firstAvailable` list at its first GPU alternative, allocation mode `All`
/// at least one), their vendor, and what each request may be allocated ([`Holding`]: its largest GPU
/// alternative, `All` every device of a Node).
fn claim_devices(
    spec: &ResourceClaimSpec,
    rules: &GpuResources,
    cluster: &dyn ClaimTemplates,
    classes: &mut Vec<String>,
) -> (u32, Option<Vendor>, Vec<Holding>) {
    let mut count = 0u32;
    let mut vendor = None;
    let mut holdings = Vec::new();
    for r in spec
        .devices
        .iter()
        .flat_map(|d| d.requests.iter().flatten())
    {
        let alternatives: Vec<(&str, Option<&str>, Option<i64>)> =
            match (&r.exactly, &r.first_available) {
                (Some(e), _) => vec![(
                    e.device_class_name.as_str(),
                    e.allocation_mode.as_deref(),
                    e.count,
                )],
                (None, Some(subs)) => subs
                    .iter()
                    .map(|s| {
                        (
                            s.device_class_name.as_str(),
                            s.allocation_mode.as_deref(),
                            s.count,
                        )
                    })
                    .collect(),
                (None, None) => Vec::new(),
            };
        let gpu: Vec<(&str, Holding)> =
            alternatives
                .into_iter()
                .filter(|(class, _, _)| rules.device_class_gpus(class, cluster).is_some())
                .map(|(class, mode, n)| {
                    let held = match mode {
                        Some("All") => Holding::AllOfNode,
                        _ => Holding::Devices(
                            n.unwrap_or(1).clamp(1, i64::from(MAX_GPUS_PER_POD)) as u32
                        ),
                    };
                    (class, held)
                })
                .collect();
        let Some(&(first_class, first)) = gpu.first() else {
            continue;
        };
        vendor = vendor.or(rules
            .device_class_gpus(first_class, cluster)
            .and_then(|g| g.vendor));
        for (class, _) in &gpu {
            if !classes.iter().any(|c| c == class) {
                classes.push(class.to_string());
            }
        }
        count = count.saturating_add(match first {
            Holding::Devices(n) => n,
            _ => 1,
        });
        let largest = gpu
            .iter()
            .map(|(_, h)| *h)
            .max_by_key(|h| match h {
                Holding::AllOfNode => u32::MAX,
                Holding::Devices(n) => *n,
                _ => 1,
            })
            .unwrap_or(first);
        holdings.push(largest);
    }
    (count, vendor, holdings)
}

/// What the Pod asks for in GPUs. `namespace` and `templates` resolve DRA claims made from a
/// ResourceClaimTemplate; a claim whose template cannot be read is noted in `dra_claims` but not counted (it
/// may be a NIC or an IMEX channel as well as a GPU).
pub fn gpu_ask(
    spec: &PodSpec,
    namespace: &str,
    rules: &GpuResources,
    templates: &dyn ClaimTemplates,
) -> GpuAsk {
    let mut warnings = Vec::new();
    let mut vendor: Option<Vendor> = None;
    let mut memory: Option<f64> = None;
    let mut kinds: Vec<GpuResourceKind> = Vec::new();
    let mut unreadable_quantities = Vec::new();
    let mut holdings = Holdings::default();
    let mut implicit_device_classes: Vec<String> = Vec::new();
    let mut note = |a: &ContainerAsk, vendor: &mut Option<Vendor>| {
        unreadable_quantities.extend(a.unreadable.iter().cloned());
        for class in &a.device_classes {
            if !implicit_device_classes.contains(class) {
                implicit_device_classes.push(class.clone());
            }
        }
        if a.devices > 0 {
            if vendor.is_none() {
                *vendor = a.vendor;
            }
            if let Some(m) = a.memory_gib {
                memory = Some(memory.map_or(m, |o: f64| o.max(m)));
            }
            for k in &a.kinds {
                if !kinds.contains(k) {
                    kinds.push(*k);
                }
            }
        }
    };
    // Effective request: max(sum of app containers + sidecar init containers, largest plain init container).
    let mut sum = 0u32;
    for c in &spec.containers {
        let a = container_ask(c, rules, templates, &mut warnings);
        sum = sum.saturating_add(a.devices);
        note(&a, &mut vendor);
        holdings.running.extend(a.holdings);
    }
    let mut init_max = 0u32;
    for c in spec.init_containers.iter().flatten() {
        let a = container_ask(c, rules, templates, &mut warnings);
        if c.restart_policy.as_deref() == Some("Always") {
            sum = sum.saturating_add(a.devices);
        } else {
            init_max = init_max.max(a.devices);
        }
        note(&a, &mut vendor);
        if c.restart_policy.as_deref() == Some("Always") {
            holdings.running.extend(a.holdings);
        } else if !a.holdings.is_empty() {
            holdings.init.push(a.holdings);
        }
    }
    let mut count = sum.max(init_max);

    let mut dra_claims = Vec::new();
    let mut dra_device_classes = implicit_device_classes.clone();
    let mut unresolved_claims = Vec::new();
    for claim in spec.resource_claims.iter().flatten() {
        dra_claims.push(claim.name.clone());
        let claim_spec = match super::pod_group::entry_claim(spec, claim, namespace, templates) {
            EntryClaim::Spec(s) => s,
            EntryClaim::Nothing => continue,
            EntryClaim::Unresolved => {
                unresolved_claims.push(claim.name.clone());
                continue;
            }
        };
        let (n, v, held) = claim_devices(&claim_spec, rules, templates, &mut dra_device_classes);
        holdings.claims.extend(held);
        if n > 0 {
            count = count.saturating_add(n);
            if vendor.is_none() {
                vendor = v;
            }
            if !kinds.contains(&GpuResourceKind::DraDeviceClass) {
                kinds.push(GpuResourceKind::DraDeviceClass);
            }
        }
    }
    if count > MAX_GPUS_PER_POD {
        warnings.push(format!(
            "the Pod asks for {count} GPUs, more than any node has; counted as {MAX_GPUS_PER_POD}"
        ));
        count = MAX_GPUS_PER_POD;
    }
    kinds.sort();
    GpuAsk {
        count,
        vendor: vendor.filter(|_| count > 0),
        memory_gib: if count == 0 { None } else { memory },
        shape: if count == 0 {
            "none".to_string()
        } else {
            kinds
                .iter()
                .map(|k| kind_name(*k))
                .collect::<Vec<_>>()
                .join("+")
        },
        dra_claims,
        dra_device_classes,
        implicit_device_classes,
        unresolved_claims,
        unreadable_quantities,
        holdings,
        warnings,
    }
}

#[cfg(test)]
mod tests;

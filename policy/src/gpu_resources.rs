//! Which Pod resources (and DRA DeviceClasses) ask for GPUs and how they count: the policy's `gpuResources`,
//! the one built-in list used when a policy does not give its own (the shipped policy file spells the same
//! list out; a test keeps them equal), and the one way a name is matched against the rules ([`lookup`]).
//!
//! Every GPU counts: each vendor's domain ends in a catch-all pattern (`nvidia.com/**`, `amd.com/**`,
//! `gpu.intel.com/**`, DeviceClasses `**.nvidia.com`, `**.amd.com`, `gpu.intel.com`), so a resource the
//! list does not name is a GPU, held to the tier, never free. What is not a GPU under those domains is listed
//! as `notGpu`, from the vendors' device plugin and DRA driver documentation:
//! - `nvidia.com/priority`: HAMi's task priority, set beside a GPU resource, not a device;
//! - `nvidia.com/rdma_shared_device_*`: NVIDIA Network Operator's RDMA shared device plugin (NICs);
//! - `amd.com/xilinx**`: the Xilinx FPGA device plugin's cards (FPGAs, not GPUs);
//! - DeviceClasses `compute-domain-daemon.nvidia.com`, `compute-domain-default-channel.nvidia.com`: NVIDIA's
//!   DRA driver's IMEX channels (ComputeDomains), not devices with GPU memory.
//!
//! Intel's `i915_monitoring` / `xe_monitoring` are GPUs: the plugin documents them as access to every GPU of
//! the node. Intel's `memory.max` (bytes) and `tiles` are shares of a device, like `millicores`.
use crate::schema::Vendor;

pub use crate::schema::GpuResourceKind;

/// Memory quantities of HAMi's `nvidia.com/gpumem` are MiB.
pub const MIB_IN_GIB: f64 = 1.0 / 1024.0;

/// Intel's `gpu.intel.com/memory.max` is bytes.
pub const BYTES_IN_GIB: f64 = 1.0 / (1u64 << 30) as f64;

/// The placeholder of a MIG pattern that captures the slice memory in GiB.
pub const MEMORY_PLACEHOLDER: &str = "{memoryGiB}";

/// The extended resources Kubernetes backs by a DRA DeviceClass (`deviceclass.resource.kubernetes.io/<class>`):
/// a GPU when `<class>` is a GPU DeviceClass.
pub const DEVICE_CLASS_RESOURCE_PREFIX: &str = "deviceclass.resource.kubernetes.io/";

/// The vendor whose resource domain `<domain>/<anything>` is under (see [`Vendor::facts`]): a GPU of that
/// vendor unless the list calls it `notGpu` (what the fuzz properties hold the webhooks to).
pub fn vendor_of_resource(resource: &str) -> Option<Vendor> {
    let (domain, rest) = resource.split_once('/')?;
    (!rest.is_empty())
        .then(|| {
            Vendor::ALL
                .into_iter()
                .find(|v| v.facts().resource_domain == domain)
        })
        .flatten()
}

/// One validated resource rule.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuResourceRule {
    /// The exact name, or a pattern (see [`match_pattern`]).
    pub name: String,
    pub vendor: Vendor,
    pub kind: GpuResourceKind,
    /// [`GpuResourceKind::Memory`] only: GiB per unit of the quantity (MiB: 1/1024); 0 otherwise.
    pub memory_gib_per_unit: f64,
}

/// Whether a rule name is a pattern (`*`, `**` or [`MEMORY_PLACEHOLDER`]).
pub fn is_pattern(name: &str) -> bool {
    name.contains('*') || name.contains(MEMORY_PLACEHOLDER)
}

/// Matches `name` against a pattern: `**` is `[A-Za-z0-9._-]+`, `*` is `[a-z0-9]+`, [`MEMORY_PLACEHOLDER`]
/// digits (the GiB), anything else itself. `Some(memory)` on a match.
pub fn match_pattern(pattern: &str, name: &str) -> Option<Option<f64>> {
    fn run(n: &str, ok: impl Fn(u8) -> bool) -> usize {
        n.bytes().take_while(|c| ok(*c)).count()
    }
    fn go(p: &str, n: &str, mem: &mut Option<f64>) -> bool {
        if let Some(rest) = p.strip_prefix(MEMORY_PLACEHOLDER) {
            let digits = run(n, |c| c.is_ascii_digit());
            return (1..=digits).rev().any(|k| {
                let ok = go(rest, &n[k..], mem);
                if ok && mem.is_none() {
                    *mem = n[..k].parse().ok();
                }
                ok
            });
        }
        if let Some(rest) = p.strip_prefix("**") {
            let len = run(n, |c| c.is_ascii_alphanumeric() || b"._-".contains(&c));
            return (1..=len).rev().any(|k| go(rest, &n[k..], mem));
        }
        if let Some(rest) = p.strip_prefix('*') {
            let len = run(n, |c| c.is_ascii_lowercase() || c.is_ascii_digit());
            return (1..=len).rev().any(|k| go(rest, &n[k..], mem));
        }
        match (p.chars().next(), n.chars().next()) {
            (None, None) => true,
            (Some(a), Some(b)) if a == b => go(&p[a.len_utf8()..], &n[b.len_utf8()..], mem),
            _ => false,
        }
    }
    let mut mem = None;
    go(pattern, name, &mut mem).then_some(mem)
}

/// THE matching rule: the rule (among those `eligible`) whose exact name is `name`, else the first whose
/// pattern matches it, with the memory a MIG pattern captured.
pub fn lookup<'r, R>(
    rules: &'r [R],
    name: &str,
    rule_name: impl Fn(&R) -> &str,
    eligible: impl Fn(&R) -> bool,
) -> Option<(&'r R, Option<f64>)> {
    let (i, memory) = Matcher::new(rules, &rule_name, &eligible).find(name)?;
    Some((&rules[i], memory))
}

/// [`lookup`]'s rule compiled once for many names (every resource of every Pod): the eligible exact names
/// in a map (the first of a name wins), the eligible patterns in list order with the literal text before
/// their first wildcard, which a name must start with before the pattern is tried.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Matcher {
    exact: std::collections::HashMap<String, usize>,
    patterns: Vec<(usize, String, usize)>,
}

impl Matcher {
    pub fn new<R>(
        rules: &[R],
        rule_name: impl Fn(&R) -> &str,
        eligible: impl Fn(&R) -> bool,
    ) -> Self {
        let mut m = Matcher::default();
        for (i, r) in rules.iter().enumerate().filter(|(_, r)| eligible(r)) {
            let name = rule_name(r);
            if is_pattern(name) {
                let literal = name.find(['*', '{']).unwrap_or(name.len());
                m.patterns.push((i, name.to_string(), literal));
            } else {
                m.exact.entry(name.to_string()).or_insert(i);
            }
        }
        m
    }

    /// The index of the matching rule, and the memory a MIG pattern captured.
    pub fn find(&self, name: &str) -> Option<(usize, Option<f64>)> {
        if let Some(&i) = self.exact.get(name) {
            return Some((i, None));
        }
        self.patterns.iter().find_map(|(i, pattern, literal)| {
            if !name.starts_with(&pattern[..*literal]) {
                return None;
            }
            match_pattern(pattern, name).map(|m| (*i, m))
        })
    }
}

/// NVIDIA (whole, shared, MIG, HAMi memory and cores, anything else of `nvidia.com`), AMD (anything of
/// `amd.com` but FPGAs), Intel (devices, monitoring, shares, anything else of `gpu.intel.com`), the vendors'
/// DRA DeviceClasses, and the exceptions of the module documentation.
pub fn default_rules() -> Vec<GpuResourceRule> {
    use GpuResourceKind as K;
    use Vendor as V;
    let rule = |name: &str, vendor: V, kind: K, memory_gib_per_unit: f64| GpuResourceRule {
        name: name.to_string(),
        vendor,
        kind,
        memory_gib_per_unit,
    };
    vec![
        rule("nvidia.com/gpu", V::Nvidia, K::Devices, 0.0),
        rule("nvidia.com/gpu.shared", V::Nvidia, K::SharedDevices, 0.0),
        rule(
            "nvidia.com/mig-*g.{memoryGiB}gb",
            V::Nvidia,
            K::MigSlices,
            0.0,
        ),
        rule(
            "nvidia.com/mig-*g.{memoryGiB}gb.shared",
            V::Nvidia,
            K::MigSlices,
            0.0,
        ),
        rule("nvidia.com/gpumem", V::Nvidia, K::Memory, MIB_IN_GIB),
        rule("nvidia.com/gpumem-percentage", V::Nvidia, K::Cores, 0.0),
        rule("nvidia.com/gpucores", V::Nvidia, K::Cores, 0.0),
        rule("nvidia.com/priority", V::Nvidia, K::NotGpu, 0.0),
        rule("nvidia.com/rdma_shared_device_*", V::Nvidia, K::NotGpu, 0.0),
        rule("nvidia.com/**.shared", V::Nvidia, K::SharedDevices, 0.0),
        rule("nvidia.com/**", V::Nvidia, K::Devices, 0.0),
        rule("amd.com/gpu", V::Amd, K::Devices, 0.0),
        rule("amd.com/xilinx**", V::Amd, K::NotGpu, 0.0),
        rule("amd.com/**", V::Amd, K::Devices, 0.0),
        rule("gpu.intel.com/i915", V::Intel, K::Devices, 0.0),
        rule("gpu.intel.com/xe", V::Intel, K::Devices, 0.0),
        rule("gpu.intel.com/i915_monitoring", V::Intel, K::Devices, 0.0),
        rule("gpu.intel.com/xe_monitoring", V::Intel, K::Devices, 0.0),
        rule("gpu.intel.com/millicores", V::Intel, K::Cores, 0.0),
        rule("gpu.intel.com/tiles", V::Intel, K::Cores, 0.0),
        rule(
            "gpu.intel.com/memory.max",
            V::Intel,
            K::Memory,
            BYTES_IN_GIB,
        ),
        rule("gpu.intel.com/**", V::Intel, K::Devices, 0.0),
        rule("gpu.nvidia.com", V::Nvidia, K::DraDeviceClass, 0.0),
        rule("mig.nvidia.com", V::Nvidia, K::DraDeviceClass, 0.0),
        rule(
            "compute-domain-daemon.nvidia.com",
            V::Nvidia,
            K::NotGpu,
            0.0,
        ),
        rule(
            "compute-domain-default-channel.nvidia.com",
            V::Nvidia,
            K::NotGpu,
            0.0,
        ),
        rule("**.nvidia.com", V::Nvidia, K::DraDeviceClass, 0.0),
        rule("gpu.amd.com", V::Amd, K::DraDeviceClass, 0.0),
        rule("**.amd.com", V::Amd, K::DraDeviceClass, 0.0),
        rule("gpu.intel.com", V::Intel, K::DraDeviceClass, 0.0),
        rule("**.gpu.intel.com", V::Intel, K::DraDeviceClass, 0.0),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind_of(name: &str) -> Option<(GpuResourceKind, Option<f64>)> {
        let rules = default_rules();
        lookup(&rules, name, |r| r.name.as_str(), |_| true).map(|(r, m)| (r.kind, m))
    }

    /// Every vendor of the vendor table has its catch-alls in the default list: any resource of its domain
    /// and its DRA driver's DeviceClass are its GPUs (a new vendor fails here until its rules are listed).
    #[test]
    fn every_vendor_has_its_catch_alls() {
        let rules = default_rules();
        for v in Vendor::ALL {
            let f = v.facts();
            let name = format!("{}/some-future-gpu", f.resource_domain);
            assert_eq!(vendor_of_resource(&name), Some(v));
            let resource = lookup(
                &rules,
                &name,
                |r| r.name.as_str(),
                |r| r.kind != GpuResourceKind::DraDeviceClass,
            );
            assert_eq!(
                resource.map(|(r, _)| (r.kind, r.vendor)),
                Some((GpuResourceKind::Devices, v)),
                "{name}"
            );
            let class = lookup(
                &rules,
                f.dra_driver,
                |r| r.name.as_str(),
                |r| {
                    matches!(
                        r.kind,
                        GpuResourceKind::DraDeviceClass | GpuResourceKind::NotGpu
                    )
                },
            );
            assert_eq!(
                class.map(|(r, _)| (r.kind, r.vendor)),
                Some((GpuResourceKind::DraDeviceClass, v)),
                "{}",
                f.dra_driver
            );
        }
        assert_eq!(vendor_of_resource("example.com/gpu"), None);
        assert_eq!(vendor_of_resource("nvidia.com/"), None);
    }

    #[test]
    fn exact_names_win_and_vendor_domains_catch_the_rest() {
        use GpuResourceKind as K;
        for (name, want) in [
            ("nvidia.com/gpu", Some((K::Devices, None))),
            ("nvidia.com/mig-1g.10gb", Some((K::MigSlices, Some(10.0)))),
            (
                "nvidia.com/mig-1g.10gb.shared",
                Some((K::MigSlices, Some(10.0))),
            ),
            ("nvidia.com/gpu-h100.shared", Some((K::SharedDevices, None))),
            ("nvidia.com/mig-1c.3g.20gb", Some((K::Devices, None))),
            ("nvidia.com/priority", Some((K::NotGpu, None))),
            ("nvidia.com/rdma_shared_device_a", Some((K::NotGpu, None))),
            ("nvidia.com/H100_renamed", Some((K::Devices, None))),
            ("amd.com/cpx_nps4", Some((K::Devices, None))),
            ("amd.com/xilinx_u250", Some((K::NotGpu, None))),
            ("gpu.intel.com/i915_monitoring", Some((K::Devices, None))),
            ("gpu.intel.com/memory.max", Some((K::Memory, None))),
            ("gpu.intel.com/anything-new", Some((K::Devices, None))),
            ("mig.nvidia.com", Some((K::DraDeviceClass, None))),
            ("vgpu.nvidia.com", Some((K::DraDeviceClass, None))),
            ("compute-domain-daemon.nvidia.com", Some((K::NotGpu, None))),
            ("gpu.intel.com", Some((K::DraDeviceClass, None))),
            ("qat.intel.com", None),
            ("example.com/gpu", None),
            ("nvidia.com/", None),
            ("xnvidia.com/gpu", None),
            ("sriov.example.com", None),
        ] {
            assert_eq!(kind_of(name), want, "{name}");
        }
    }

    #[test]
    fn patterns() {
        assert_eq!(
            match_pattern("nvidia.com/mig-*g.{memoryGiB}gb", "nvidia.com/mig-g.10gb"),
            None
        );
        assert_eq!(
            match_pattern("nvidia.com/mig-*g.{memoryGiB}gb", "nvidia.com/mig-7g.80gbx"),
            None
        );
        assert_eq!(match_pattern("nvidia.com/**", "nvidia.com/a/b"), None);
        assert_eq!(match_pattern("**.nvidia.com", ".nvidia.com"), None);
        assert_eq!(match_pattern("**.nvidia.com", "a.b.nvidia.com"), Some(None));
    }
}

//! Which Pod resources (and DRA DeviceClasses) ask for GPUs and how they count: the policy's `gpuResources`,
//! and the one built-in list used when a policy does not give its own. The shipped policy file spells the
//! same list out (a test keeps them equal).
use crate::schema::Vendor;

pub use crate::schema::GpuResourceKind;

/// Memory quantities of HAMi's `nvidia.com/gpumem` are MiB.
pub const MIB_IN_GIB: f64 = 1.0 / 1024.0;

/// The placeholder of a MIG pattern that captures the slice memory in GiB.
pub const MEMORY_PLACEHOLDER: &str = "{memoryGiB}";

/// One validated resource rule.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuResourceRule {
    /// The exact resource name; for [`GpuResourceKind::MigSlices`] a pattern where `*` matches `[a-z0-9]+`
    /// and [`MEMORY_PLACEHOLDER`] the slice memory in GiB.
    pub name: String,
    pub vendor: Vendor,
    pub kind: GpuResourceKind,
    /// [`GpuResourceKind::Memory`] only: GiB per unit of the quantity (MiB: 1/1024); 0 otherwise.
    pub memory_gib_per_unit: f64,
}

/// NVIDIA (whole, shared, MIG, HAMi memory and cores), AMD and Intel (only `i915` / `xe` are devices),
/// and the vendors' DRA DeviceClasses.
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
        rule("nvidia.com/gpumem", V::Nvidia, K::Memory, MIB_IN_GIB),
        rule("nvidia.com/gpucores", V::Nvidia, K::Cores, 0.0),
        rule("amd.com/gpu", V::Amd, K::Devices, 0.0),
        rule("gpu.intel.com/i915", V::Intel, K::Devices, 0.0),
        rule("gpu.intel.com/xe", V::Intel, K::Devices, 0.0),
        rule("gpu.intel.com/millicores", V::Intel, K::Cores, 0.0),
        rule("gpu.nvidia.com", V::Nvidia, K::DraDeviceClass, 0.0),
        rule("gpu.amd.com", V::Amd, K::DraDeviceClass, 0.0),
        rule("gpu.intel.com", V::Intel, K::DraDeviceClass, 0.0),
    ]
}

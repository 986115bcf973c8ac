//! [`namespaced_resource!`]: the `kube_core::Resource` impl of a namespaced type we deserialize ourselves
//! (our custom resources and the narrow projections of built-in ones), written once; and
//! [`resource_version_order`], the order of two versions of one resource's objects.

/// Implements `kube_core::Resource` for a namespaced `$ty` with a `metadata: ObjectMeta` field, under the
/// given API group, version, kind and plural. With `serialized: [fields]`, also `serde::Serialize` as the
/// apiserver takes a write: `apiVersion`, `kind`, `metadata`, then those fields under their own names.
macro_rules! namespaced_resource {
    ($ty:ty, group: $group:expr, version: $version:expr, kind: $kind:expr, plural: $plural:expr,
     serialized: [$($field:ident),* $(,)?] $(,)?) => {
        crate::resource::namespaced_resource!($ty, group: $group, version: $version, kind: $kind, plural: $plural);

        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeStruct as _;
                let fields = [$(stringify!($field)),*].len();
                let mut s = serializer.serialize_struct($kind, 3 + fields)?;
                s.serialize_field("apiVersion", &format!("{}/{}", $group, $version))?;
                s.serialize_field("kind", $kind)?;
                s.serialize_field("metadata", &self.metadata)?;
                $(s.serialize_field(stringify!($field), &self.$field)?;)*
                s.end()
            }
        }
    };
    ($ty:ty, group: $group:expr, version: $version:expr, kind: $kind:expr, plural: $plural:expr $(,)?) => {
        impl kube_core::Resource for $ty {
            type DynamicType = ();
            type Scope = k8s_openapi::NamespaceResourceScope;

            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                $group.into()
            }
            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                $version.into()
            }
            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(
                &mut self,
            ) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

pub(crate) use namespaced_resource;

/// The order of two `metadata.resourceVersion`s of objects of one resource, as Kubernetes defines it since
/// 1.35 (KEP-5504, "comparable resource versions"): both positive decimal integers without leading zeros,
/// compared as numbers of any length. `None` when either is not of that form (an apiserver not backed by
/// etcd may serve others): the caller must then not order them.
pub fn resource_version_order(a: &str, b: &str) -> Option<std::cmp::Ordering> {
    fn comparable(v: &str) -> bool {
        !v.is_empty() && !v.starts_with('0') && v.bytes().all(|c| c.is_ascii_digit())
    }
    (comparable(a) && comparable(b)).then(|| a.len().cmp(&b.len()).then_with(|| a.cmp(b)))
}

#[cfg(test)]
mod tests {
    use super::resource_version_order;
    use std::cmp::Ordering::{Equal, Greater, Less};

    #[test]
    fn resource_versions_order_as_numbers_of_any_length() {
        assert_eq!(resource_version_order("9", "10"), Some(Less));
        assert_eq!(resource_version_order("10", "9"), Some(Greater));
        assert_eq!(resource_version_order("1234", "1234"), Some(Equal));
        let long = "18446744073709551616"; // one past u64::MAX
        assert_eq!(
            resource_version_order(long, "18446744073709551615"),
            Some(Greater)
        );
    }

    #[test]
    fn a_resource_serialized_for_a_write_carries_its_type_then_its_fields() {
        let data = [("mode".to_string(), "Enforce".to_string())].into();
        let params = crate::render::floor::parameters::FloorParameters::new("p", "ns", data);
        let text = serde_json::to_string(&params).unwrap();
        assert!(
            text.starts_with(
                r#"{"apiVersion":"gpu-admission.io/v1alpha1","kind":"FloorParameters","metadata":{"#
            ),
            "{text}"
        );
        assert!(text.ends_with(r#""data":{"mode":"Enforce"}}"#), "{text}");
    }

    #[test]
    fn resource_versions_not_of_the_integer_form_are_not_ordered() {
        for odd in ["", "0", "012", "12a", "-1", " 1"] {
            assert_eq!(resource_version_order(odd, "5"), None, "{odd:?}");
            assert_eq!(resource_version_order("5", odd), None, "{odd:?}");
        }
    }
}

//! [`namespaced_resource!`]: the `kube_core::Resource` impl of a namespaced type we deserialize ourselves
//! (our custom resources and the narrow projections of built-in ones), written once.

/// Implements `kube_core::Resource` for a namespaced `$ty` with a `metadata: ObjectMeta` field, under the
/// given API group, version, kind and plural.
macro_rules! namespaced_resource {
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

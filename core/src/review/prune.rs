//! Reading a review's object with the members no webhook reads skipped, not parsed: a Pod's
//! `metadata.managedFields` (the apiserver's field-ownership bookkeeping), `spec.volumes`, `status` and its
//! containers' members other than name, image, resources and restart policy. They were a fifth of the cost of
//! reading a Pod review (more for real Pods, whose containers carry env, probes and mounts), and none of them
//! is ever read, patched or the parent of a patched path; a Pod read here has them `None`. Everything else is read by the type's own `Deserialize`,
//! through serde_json's recursion limit as before; skipped values are not nested into (serde_json skips
//! without a recursion limit), so a deep `managedFields` no longer needs the second reading of [`super::deep`].
//!
//! serde offers no way to leave out members of a foreign type, so this is a deserializer that forwards to the
//! real one and, inside the objects named by a [`Prune`] tree only, hides the named members from the
//! type's visitor. Deeper values are handed to the real deserializer untouched (no per-value cost).

use std::borrow::Cow;
use std::fmt;

use k8s_openapi::api::core::v1::Pod;
use kube_core::DynamicObject;
use serde::Deserialize;
use serde::de::value::{BorrowedStrDeserializer, StringDeserializer};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

/// Which members of an object are skipped, and which of its members are objects pruned in turn.
#[derive(Debug)]
pub(crate) struct Prune {
    skip: &'static [&'static str],
    inside: &'static [(&'static str, Prune)],
}

/// What each container (and init container) is read without: all but its name, image, resources and restart
/// policy (what the GPU count, the sidecar rule and the checkpoint restore read), the members that make most
/// of a real Pod's bytes (env, command, probes, mounts).
const CONTAINER: Prune = Prune {
    skip: &[
        "args",
        "command",
        "env",
        "envFrom",
        "imagePullPolicy",
        "lifecycle",
        "livenessProbe",
        "ports",
        "readinessProbe",
        "resizePolicy",
        "securityContext",
        "startupProbe",
        "stdin",
        "stdinOnce",
        "terminationMessagePath",
        "terminationMessagePolicy",
        "tty",
        "volumeDevices",
        "volumeMounts",
        "workingDir",
    ],
    inside: &[],
};

/// What a Pod review's Pod is read without.
pub(crate) const POD: Prune = Prune {
    skip: &["status"],
    inside: &[
        (
            "metadata",
            Prune {
                skip: &["managedFields"],
                inside: &[],
            },
        ),
        (
            "spec",
            Prune {
                skip: &["volumes"],
                inside: &[("containers", CONTAINER), ("initContainers", CONTAINER)],
            },
        ),
    ],
};

/// How a review's object is read: a Pod without what no webhook reads, anything else whole.
pub(super) trait ReviewObject<'de>: de::Deserialize<'de> {
    fn read<D: Deserializer<'de>>(de: D) -> Result<Option<Self>, D::Error> {
        Option::deserialize(de)
    }
}

/// [`ReviewObject::read`], boxed where it is read (a request's two objects are not copied again with it).
pub(super) fn read_boxed<'de, T: ReviewObject<'de>, D: Deserializer<'de>>(
    de: D,
) -> Result<Option<Box<T>>, D::Error> {
    Ok(T::read(de)?.map(Box::new))
}

impl<'de> ReviewObject<'de> for Pod {
    fn read<D: Deserializer<'de>>(de: D) -> Result<Option<Self>, D::Error> {
        read(de, &POD)
    }
}

impl ReviewObject<'_> for DynamicObject {}
impl ReviewObject<'_> for Box<RawValue> {}

/// Deserializes `T` from `de` with `prune`'s members left out.
pub(crate) fn read<'de, T: de::Deserialize<'de>, D: Deserializer<'de>>(
    de: D,
    prune: &'static Prune,
) -> Result<T, D::Error> {
    T::deserialize(Pruning { de, prune })
}

/// The deserializer of a value whose objects are pruned by `prune`.
struct Pruning<D> {
    de: D,
    prune: &'static Prune,
}

/// The visitor of such a value: maps are handed on pruned; an `Option`'s or newtype's inner value stays
/// under the same [`Prune`].
struct PruningVisitor<V> {
    visitor: V,
    prune: &'static Prune,
}

struct PruningMap<M> {
    map: M,
    prune: &'static Prune,
    /// The [`Prune`] of the value of the key just handed on, if that value is pruned in turn.
    value: Option<&'static Prune>,
}

struct PruningSeq<A> {
    seq: A,
    prune: &'static Prune,
}

impl<'de, A: de::SeqAccess<'de>> de::SeqAccess<'de> for PruningSeq<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        self.seq.next_element_seed(PruningSeed {
            seed,
            prune: self.prune,
        })
    }

    fn size_hint(&self) -> Option<usize> {
        self.seq.size_hint()
    }
}

struct PruningSeed<S> {
    seed: S,
    prune: &'static Prune,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for PruningSeed<S> {
    type Value = S::Value;
    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<S::Value, D::Error> {
        self.seed.deserialize(Pruning {
            de,
            prune: self.prune,
        })
    }
}

/// A member name, borrowed from the body when it has no escapes.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;
    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        de.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a member name")
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

impl<'de, M: MapAccess<'de>> MapAccess<'de> for PruningMap<M> {
    type Error = M::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, M::Error> {
        loop {
            let Some(key) = self.map.next_key_seed(Key)? else {
                return Ok(None);
            };
            if self.prune.skip.contains(&key.as_ref()) {
                self.map.next_value::<IgnoredAny>()?;
                continue;
            }
            self.value = self
                .prune
                .inside
                .iter()
                .find(|(name, _)| *name == key.as_ref())
                .map(|(_, prune)| prune);
            return match key {
                Cow::Borrowed(k) => seed.deserialize(BorrowedStrDeserializer::new(k)),
                Cow::Owned(k) => seed.deserialize(StringDeserializer::new(k)),
            }
            .map(Some);
        }
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, M::Error> {
        match self.value.take() {
            Some(prune) => self.map.next_value_seed(PruningSeed { seed, prune }),
            None => self.map.next_value_seed(seed),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        self.map.size_hint()
    }
}

/// Visitor methods handed on unchanged.
macro_rules! forward_visits {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {$(
        fn $method<E: de::Error>(self, $($arg: $ty),*) -> Result<Self::Value, E> {
            self.visitor.$method($($arg),*)
        }
    )*};
}

impl<'de, V: Visitor<'de>> Visitor<'de> for PruningVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.visitor.expecting(f)
    }

    forward_visits! {
        visit_bool(v: bool);
        visit_i8(v: i8);
        visit_i16(v: i16);
        visit_i32(v: i32);
        visit_i64(v: i64);
        visit_i128(v: i128);
        visit_u8(v: u8);
        visit_u16(v: u16);
        visit_u32(v: u32);
        visit_u64(v: u64);
        visit_u128(v: u128);
        visit_f32(v: f32);
        visit_f64(v: f64);
        visit_char(v: char);
        visit_str(v: &str);
        visit_borrowed_str(v: &'de str);
        visit_string(v: String);
        visit_bytes(v: &[u8]);
        visit_borrowed_bytes(v: &'de [u8]);
        visit_byte_buf(v: Vec<u8>);
        visit_none();
        visit_unit();
    }

    fn visit_some<D: Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        self.visitor.visit_some(Pruning {
            de,
            prune: self.prune,
        })
    }

    fn visit_newtype_struct<D: Deserializer<'de>>(self, de: D) -> Result<Self::Value, D::Error> {
        self.visitor.visit_newtype_struct(Pruning {
            de,
            prune: self.prune,
        })
    }

    /// The elements of a pruned array (`containers`) are pruned alike.
    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        self.visitor.visit_seq(PruningSeq {
            seq,
            prune: self.prune,
        })
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        self.visitor.visit_map(PruningMap {
            map,
            prune: self.prune,
            value: None,
        })
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<Self::Value, A::Error> {
        self.visitor.visit_enum(data)
    }
}

/// Deserializer methods handed on with the visitor wrapped.
macro_rules! forward_deserialize {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {$(
        fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* visitor: V) -> Result<V::Value, D::Error> {
            self.de.$method($($arg,)* PruningVisitor { visitor, prune: self.prune })
        }
    )*};
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Pruning<D> {
    type Error = D::Error;

    forward_deserialize! {
        deserialize_any();
        deserialize_bool();
        deserialize_i8();
        deserialize_i16();
        deserialize_i32();
        deserialize_i64();
        deserialize_i128();
        deserialize_u8();
        deserialize_u16();
        deserialize_u32();
        deserialize_u64();
        deserialize_u128();
        deserialize_f32();
        deserialize_f64();
        deserialize_char();
        deserialize_str();
        deserialize_string();
        deserialize_bytes();
        deserialize_byte_buf();
        deserialize_option();
        deserialize_unit();
        deserialize_unit_struct(name: &'static str);
        deserialize_newtype_struct(name: &'static str);
        deserialize_seq();
        deserialize_tuple(len: usize);
        deserialize_tuple_struct(name: &'static str, len: usize);
        deserialize_map();
        deserialize_struct(name: &'static str, fields: &'static [&'static str]);
        deserialize_enum(name: &'static str, variants: &'static [&'static str]);
        deserialize_identifier();
        deserialize_ignored_any();
    }

    fn is_human_readable(&self) -> bool {
        self.de.is_human_readable()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Container;

    fn pod(text: &str) -> serde_json::Result<Pod> {
        let mut de = serde_json::Deserializer::from_str(text);
        let pod = read(&mut de, &POD)?;
        de.end()?;
        Ok(pod)
    }

    #[test]
    fn the_pruned_members_are_left_out_and_everything_else_read_as_serde_reads_it() {
        let text = r#"{"apiVersion":"v1","kind":"Pod",
            "metadata":{"name":"p","namespace":"ml","labels":{"status":"x","volumes":"y"},
              "annotations":{"managedFields":"kept"},
              "managedFields":[{"manager":"kubectl","operation":"Update","fieldsType":"FieldsV1","fieldsV1":{"f:a":{}}}],
              "ownerReferences":[{"apiVersion":"batch/v1","kind":"Job","name":"j","uid":"u","controller":true}]},
            "spec":{"volumes":[{"name":"v","emptyDir":{}}],
              "containers":[{"name":"c","image":"i","resources":{"limits":{"nvidia.com/gpu":"2"}},
                "volumeMounts":[{"name":"v","mountPath":"/v"}],"env":[{"name":"resources","value":"x"}],
                "command":["run"],"livenessProbe":{"exec":{"command":["true"]}},"securityContext":{"privileged":false}},
                {"name":"d","image":"j","env":[{"name":"A","value":"1"}]}],
              "initContainers":[{"name":"init","image":"k","restartPolicy":"Always","args":["x"],
                "resources":{"requests":{"nvidia.com/gpu":"1"}},"ports":[{"containerPort":80}]}],
              "nodeSelector":{"volumes":"z"},"tolerations":[{"key":"k","operator":"Exists"}],
              "affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[
                {"matchExpressions":[{"key":"a","operator":"In","values":["b"]}]}]}}}},
            "status":{"phase":"Pending"}}"#;
        let pruned = pod(text).unwrap();
        let mut full: Pod = serde_json::from_str(text).unwrap();
        assert!(full.metadata.managed_fields.is_some() && full.status.is_some());
        full.metadata.managed_fields = None;
        let spec = full.spec.as_mut().unwrap();
        spec.volumes = None;
        for c in spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
        {
            // What the webhooks read of a container is kept.
            *c = Container {
                name: std::mem::take(&mut c.name),
                image: c.image.take(),
                resources: c.resources.take(),
                restart_policy: c.restart_policy.take(),
                ..Default::default()
            };
        }
        full.status = None;
        assert_eq!(pruned, full);
        let init = &pruned
            .spec
            .as_ref()
            .unwrap()
            .init_containers
            .as_ref()
            .unwrap()[0];
        assert_eq!(init.restart_policy.as_deref(), Some("Always"));
        assert!(init.resources.is_some() && init.args.is_none());
        // Members of the same names elsewhere (labels, annotations, selectors) are kept.
        assert_eq!(pruned.metadata.labels.as_ref().unwrap()["volumes"], "y");
        assert_eq!(
            pruned.metadata.annotations.as_ref().unwrap()["managedFields"],
            "kept"
        );
        let spec = pruned.spec.unwrap();
        assert_eq!(spec.node_selector.unwrap()["volumes"], "z");
        assert!(spec.containers[0].volume_mounts.is_none() && spec.containers[1].env.is_none());
    }

    #[test]
    fn escaped_names_and_errors_read_as_before() {
        // A member name with an escape is not borrowed; it still names the field.
        let read = pod(r#"{"metadata":{"n\u0061me":"p"},"spec":{"containers":[]}}"#).unwrap();
        assert_eq!(read.metadata.name.as_deref(), Some("p"));
        // A wrongly typed member that is read is still an error; one that is skipped is not read at all.
        assert!(pod_err(r#"{"metadata":{"name":7}}"#).contains("invalid type"));
        assert!(pod_err(r#"{"spec":{"containers":[],"nodeName":[]}}"#).contains("invalid type"));
        let skipped = r#"{"metadata":{"name":"p","managedFields":7},"spec":{"containers":[],"volumes":"x"},"status":1}"#;
        assert!(pod(skipped).is_ok());
    }

    fn pod_err(text: &str) -> String {
        pod(text).unwrap_err().to_string()
    }

    #[test]
    fn a_deep_pruned_member_is_skipped_without_the_recursion_limit() {
        let deep = "[".repeat(5000) + &"]".repeat(5000);
        let text = format!(
            r#"{{"metadata":{{"name":"p","managedFields":{deep}}},"spec":{{"containers":[]}}}}"#
        );
        assert!(
            serde_json::from_str::<Pod>(&text).is_err(),
            "too deep read whole"
        );
        assert_eq!(pod(&text).unwrap().metadata.name.as_deref(), Some("p"));
    }
}

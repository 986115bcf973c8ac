//! RFC 6902 operations built from pointer tokens (`jsonptr` escapes `~` and `/`): a missing parent is added
//! whole, with its new members inside, before anything is added under it; arrays are appended with `/-`.

use json_patch::{AddOperation, PatchOperation};
use jsonptr::PointerBuf;
use serde_json::Value;

pub(super) fn ptr<'t>(tokens: impl IntoIterator<Item = &'t str>) -> PointerBuf {
    PointerBuf::from_tokens(tokens)
}

pub(super) fn add(path: PointerBuf, value: Value) -> PatchOperation {
    PatchOperation::Add(AddOperation { path, value })
}

/// Adds `members` to the map at `parent`: one `add` of the whole map when it is missing (or null), else one
/// `add` per member.
pub(super) fn add_to_map(
    ops: &mut Vec<PatchOperation>,
    parent: &[&str],
    exists: bool,
    members: Vec<(String, Value)>,
) {
    if members.is_empty() {
        return;
    }
    if exists {
        for (k, v) in members {
            ops.push(add(ptr(parent.iter().copied().chain([k.as_str()])), v));
        }
    } else {
        ops.push(add(
            ptr(parent.iter().copied()),
            Value::Object(members.into_iter().collect()),
        ));
    }
}

/// Appends `items` to the array at `parent` (`/-`), or adds the whole array when it is missing.
pub(super) fn append_to_array(
    ops: &mut Vec<PatchOperation>,
    parent: &[&str],
    exists: bool,
    items: Vec<Value>,
) {
    if items.is_empty() {
        return;
    }
    if exists {
        for v in items {
            ops.push(add(ptr(parent.iter().copied().chain(["-"])), v));
        }
    } else {
        ops.push(add(ptr(parent.iter().copied()), Value::Array(items)));
    }
}
